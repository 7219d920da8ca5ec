"""elf.py — an ELF file's section headers and function symbols, read from
its bytes, never loaded (loading a malloc into the reading process would be
unsafe).  64-bit little-endian objects only, which is what this project
builds and runs on.  Used by the profiler's symbolizer, IMAS's check of a
candidate allocator, and the footprint tests."""
import struct
from collections import namedtuple

SHT_SYMTAB, SHT_NOBITS, SHT_DYNSYM = 2, 8, 11
SHF_ALLOC = 2
STT_FUNC = 2

Section = namedtuple("Section", "name type flags addr offset size link info align entsize")


def is_elf64le(data):
    return len(data) >= 64 and data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1


def sections(data):
    """The section headers of an ELF image (bytes); ValueError when it is not
    a 64-bit little-endian ELF file or its header table is cut short."""
    if not is_elf64le(data):
        raise ValueError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    if shoff + shnum * shentsize > len(data):
        raise ValueError("section header table past the end of the file")
    return [Section(*struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)) for i in range(shnum)]


def functions(data, secs, sh_type):
    """(name, value, size, section index) of each function symbol in the
    tables of type sh_type (SHT_SYMTAB or SHT_DYNSYM); an index of 0 is an
    import, not a definition."""
    for sh in secs:
        if sh.type != sh_type:
            continue
        strtab = secs[sh.link].offset
        entsize = sh.entsize or 24
        for k in range(sh.size // entsize):
            st_name, st_info, _, st_shndx, st_value, st_size = struct.unpack_from("<IBBHQQ", data, sh.offset + k * entsize)
            if st_info & 0xf == STT_FUNC:
                end = data.index(b"\0", strtab + st_name)
                yield data[strtab + st_name:end].decode(errors="replace"), st_value, st_size, st_shndx
