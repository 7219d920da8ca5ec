/* rebind.c — selection without a tax: once the allocator is chosen, every
 * loaded object's GOT slots for the malloc family that the dynamic loader
 * bound to this shim (or that are still unresolved lazy PLT slots) are
 * rewritten to the chosen allocator's own functions.  Calls then go straight
 * there: the chosen allocator's code runs, not ours.  libimas.so's exported
 * functions stay as forwarders for what cannot be rewritten: ld.so's own
 * allocation pointers (looked up once at start-up), objects dlopen()ed later,
 * and addresses of malloc copied before the rewrite.
 *
 * A slot is rewritten only when it holds our own address (imas_self_*) or,
 * for a PLT slot, an address inside its own object (lazy binding not done
 * yet); a slot bound elsewhere (a candidate preloaded before us, a non-PIE
 * executable's canonical PLT entry, another namespace) is left alone.  Slots
 * in the RELRO segment are unprotected for the write and protected again.
 * Runs inside dl_iterate_phdr, i.e. under the loader's lock: no dlopen can
 * change the list meanwhile.  Each slot is one aligned 8-byte store, so a
 * thread calling through it sees the old or the new target, both valid.
 *
 * Also here: a symbol lookup restricted to one loaded object (GNU or SysV
 * hash table).  dlsym(handle) would search the object's dependencies too —
 * and return glibc's pvalloc for jemalloc, which has none — and each failed
 * dlsym leaves an error string in bootstrap memory that libc frees later
 * through a rewritten slot. */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include "imas.h"

#if __ELF_NATIVE_CLASS == 64
#define ST_TYPE ELF64_ST_TYPE
#define R_TYPE  ELF64_R_TYPE
#define R_SYM   ELF64_R_SYM
#else
#define ST_TYPE ELF32_ST_TYPE
#define R_TYPE  ELF32_R_TYPE
#define R_SYM   ELF32_R_SYM
#endif

#if defined(__x86_64__)
#define R_JUMP_SLOT R_X86_64_JUMP_SLOT
#define R_GLOB_DAT  R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#define R_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define R_GLOB_DAT  R_AARCH64_GLOB_DAT
#endif

/* One object's dynamic tables, addresses already relocated. */
struct dyn {
    uintptr_t base;
    const ElfW(Sym) *symtab;
    const char *strtab;
    const ElfW(Half) *versym;
    const uint32_t *gnu_hash, *sysv_hash;
    const ElfW(Rela) *rela, *jmprel;
    size_t relasz, jmprelsz;
};

static void read_dyn(struct dyn *d, uintptr_t base, const ElfW(Dyn) *dyn)
{
    memset(d, 0, sizeof *d);
    d->base = base;
    for (; dyn && dyn->d_tag != DT_NULL; dyn++) {
        /* ld.so relocates the d_ptr entries of a writable .dynamic in place;
         * a read-only one (the vDSO's) keeps them relative to the base. */
        uintptr_t p = dyn->d_un.d_ptr;
        if (p < base)
            p += base;
        switch (dyn->d_tag) {
        case DT_SYMTAB:   d->symtab = (const ElfW(Sym) *)p; break;
        case DT_STRTAB:   d->strtab = (const char *)p; break;
        case DT_VERSYM:   d->versym = (const ElfW(Half) *)p; break;
        case DT_GNU_HASH: d->gnu_hash = (const uint32_t *)p; break;
        case DT_HASH:     d->sysv_hash = (const uint32_t *)p; break;
        case DT_RELA:     d->rela = (const ElfW(Rela) *)p; break;
        case DT_RELASZ:   d->relasz = dyn->d_un.d_val; break;
        case DT_JMPREL:   d->jmprel = (const ElfW(Rela) *)p; break;
        case DT_PLTRELSZ: d->jmprelsz = dyn->d_un.d_val; break;
        case DT_PLTREL:   if (dyn->d_un.d_val != DT_RELA) d->jmprel = NULL; break;
        }
    }
}

/* A function this object itself defines under name (default version). */
static const ElfW(Sym) *match(const struct dyn *d, uint32_t i, const char *name)
{
    const ElfW(Sym) *s = &d->symtab[i];
    unsigned type = ST_TYPE(s->st_info);
    if (s->st_shndx == SHN_UNDEF || (type != STT_FUNC && type != STT_GNU_IFUNC) ||
        strcmp(d->strtab + s->st_name, name) != 0)
        return NULL;
    if (d->versym && (d->versym[i] & 0x8000))
        return NULL;                            /* a hidden (non-default) version */
    return s;
}

static const ElfW(Sym) *lookup(const struct dyn *d, const char *name)
{
    if (!d->symtab || !d->strtab)
        return NULL;
    if (d->gnu_hash) {
        const uint32_t *h = d->gnu_hash;
        uint32_t nbuckets = h[0], symoffset = h[1], bloom_size = h[2], bloom_shift = h[3];
        const ElfW(Addr) *bloom = (const ElfW(Addr) *)(h + 4);
        const uint32_t *buckets = (const uint32_t *)(bloom + bloom_size);
        const uint32_t *chain = buckets + nbuckets;
        uint32_t hv = 5381;                     /* the GNU hash: h * 33 + c */
        for (const unsigned char *c = (const unsigned char *)name; *c; c++)
            hv = hv * 33 + *c;
        const unsigned bits = sizeof(ElfW(Addr)) * 8;
        ElfW(Addr) word = bloom[(hv / bits) % bloom_size];
        ElfW(Addr) mask = ((ElfW(Addr))1 << (hv % bits)) | ((ElfW(Addr))1 << ((hv >> bloom_shift) % bits));
        if (!nbuckets || (word & mask) != mask)
            return NULL;
        uint32_t i = buckets[hv % nbuckets];
        if (i < symoffset)
            return NULL;
        for (;; i++) {
            uint32_t h2 = chain[i - symoffset];
            const ElfW(Sym) *s;
            if ((hv | 1) == (h2 | 1) && (s = match(d, i, name)))
                return s;
            if (h2 & 1)
                return NULL;
        }
    }
    if (d->sysv_hash) {
        uint32_t nbucket = d->sysv_hash[0], hv = 0;
        const uint32_t *bucket = d->sysv_hash + 2, *chain = bucket + nbucket;
        for (const unsigned char *c = (const unsigned char *)name; *c; c++) {
            hv = (hv << 4) + *c;                /* the SysV ELF hash */
            uint32_t g = hv & 0xf0000000u;
            if (g)
                hv ^= g >> 24;
            hv &= ~g;
        }
        for (uint32_t i = nbucket ? bucket[hv % nbucket] : 0; i; i = chain[i]) {
            const ElfW(Sym) *s = match(d, i, name);
            if (s)
                return s;
        }
    }
    return NULL;
}

void *imas_own_symbol(void *handle, const char *name)
{
    struct link_map *lm = NULL;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || !lm)
        return NULL;
    struct dyn d;
    read_dyn(&d, lm->l_addr, lm->l_ld);
    const ElfW(Sym) *s = lookup(&d, name);
    if (!s)
        return NULL;
    if (ST_TYPE(s->st_info) == STT_GNU_IFUNC)
        return dlsym(handle, name);             /* defined here (checked), so no error is left */
    return (void *)(d.base + s->st_value);
}

void *imas_phdr_symbol(void *arg, const char *name)
{
    const struct dl_phdr_info *info = arg;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type != PT_DYNAMIC)
            continue;
        struct dyn d;
        read_dyn(&d, info->dlpi_addr, (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr));
        const ElfW(Sym) *s = lookup(&d, name);
        /* An IFUNC would need its resolver run: not during a dlopen. */
        return s && ST_TYPE(s->st_info) == STT_FUNC ? (void *)(d.base + s->st_value) : NULL;
    }
    return NULL;
}

/* ---- rewriting the GOT slots -------------------------------------------- */

static const char *const entry_name[IMAS_E_COUNT] = {
    "malloc", "free", "calloc", "realloc", "reallocarray", "memalign", "aligned_alloc",
    "posix_memalign", "valloc", "pvalloc", "malloc_usable_size",
};
/* Entry points that take a pointer the program got from us: rewritten only
 * when no bootstrap block can reach them (see imas_rebind's caller). */
static const bool takes_pointer[IMAS_E_COUNT] = {
    [IMAS_E_FREE] = true, [IMAS_E_REALLOC] = true, [IMAS_E_REALLOCARRAY] = true, [IMAS_E_USABLE] = true,
};

struct rebind_ctx {
    const void *self[IMAS_E_COUNT], *target[IMAS_E_COUNT];
    bool skip[IMAS_E_COUNT];
    uintptr_t own;                  /* an address inside libimas.so */
    unsigned patched;
};

static int entry_of(const char *name)
{
    switch (name[0]) {              /* most symbols are rejected on their first byte */
    case 'm': case 'f': case 'c': case 'r': case 'a': case 'p': case 'v':
        for (int i = 0; i < IMAS_E_COUNT; i++)
            if (!strcmp(name, entry_name[i]))
                return i;
    }
    return -1;
}

static bool in_object(const struct dl_phdr_info *info, uintptr_t a)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && a >= lo && a < lo + ph->p_memsz)
            return true;
    }
    return false;
}

/* Rewrites the slots of one relocation table; relro: the object's RELRO range. */
static void patch_table(struct rebind_ctx *c, const struct dl_phdr_info *info, const struct dyn *d,
                        const ElfW(Rela) *r, size_t bytes, uintptr_t relro_lo, uintptr_t relro_hi)
{
    static const size_t page_mask = 4095;
    bool unprotected = false;
    for (size_t k = 0; r && k < bytes / sizeof *r; k++) {
        unsigned type = R_TYPE(r[k].r_info);
        if (type != R_JUMP_SLOT && type != R_GLOB_DAT)
            continue;
        int e = entry_of(d->strtab + d->symtab[R_SYM(r[k].r_info)].st_name);
        if (e < 0 || c->skip[e] || !c->target[e])
            continue;
        void **slot = (void **)(d->base + r[k].r_offset);
        const void *cur = *slot;
        bool lazy = type == R_JUMP_SLOT && in_object(info, (uintptr_t)cur);
        if (cur != c->self[e] && !lazy)
            continue;
        uintptr_t s = (uintptr_t)slot;
        if (s >= relro_lo && s < relro_hi && !unprotected) {
            size_t len = ((relro_hi + page_mask) & ~page_mask) - (relro_lo & ~page_mask);
            if (mprotect((void *)(relro_lo & ~page_mask), len, PROT_READ | PROT_WRITE) != 0)
                continue;           /* leave it bound to us: a forwarder, still correct */
            unprotected = true;
        }
        __atomic_store_n(slot, (void *)c->target[e], __ATOMIC_RELEASE);
        c->patched++;
    }
    if (unprotected)
        mprotect((void *)(relro_lo & ~page_mask),
                 ((relro_hi + page_mask) & ~page_mask) - (relro_lo & ~page_mask), PROT_READ);
}

static int patch_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct rebind_ctx *c = arg;
    (void)size;
    if (in_object(info, c->own))
        return 0;                   /* our own slots keep pointing at our entry points */
    const ElfW(Dyn) *dyn = NULL;
    uintptr_t relro_lo = 0, relro_hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(info->dlpi_addr + ph->p_vaddr);
        else if (ph->p_type == PT_GNU_RELRO) {
            relro_lo = info->dlpi_addr + ph->p_vaddr;
            relro_hi = relro_lo + ph->p_memsz;
        }
    }
    if (!dyn)
        return 0;
    struct dyn d;
    read_dyn(&d, info->dlpi_addr, dyn);
    if (!d.symtab || !d.strtab)
        return 0;
    patch_table(c, info, &d, d.jmprel, d.jmprelsz, relro_lo, relro_hi);
    patch_table(c, info, &d, d.rela, d.relasz, relro_lo, relro_hi);
    return 0;
}

unsigned imas_rebind(bool pointers_too)
{
#if defined(R_JUMP_SLOT)
    struct rebind_ctx c = {
        .target = { imas_fwd.malloc, imas_fwd.free, imas_fwd.calloc, imas_fwd.realloc,
                    imas_fwd.reallocarray, imas_fwd.memalign, imas_fwd.aligned_alloc,
                    imas_fwd.posix_memalign, imas_fwd.valloc, imas_fwd.pvalloc,
                    imas_fwd.malloc_usable_size },
        .own = (uintptr_t)imas_rebind,
    };
    for (int e = 0; e < IMAS_E_COUNT; e++) {
        c.self[e] = imas_self[e];
        c.skip[e] = takes_pointer[e] && !pointers_too;
    }
    dl_iterate_phdr(patch_object, &c);
    return c.patched;
#else
    (void)pointers_too;
    return 0;                       /* an architecture we do not know: stay a forwarder */
#endif
}
