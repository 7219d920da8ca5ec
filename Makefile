# slabkit — plain make.  Entry points: make (build), make test, make bench
# (both do their own set-up: Debian packages, the Python environment), make
# install.  SANITIZE=1 builds everything with ASan+UBSan into build-san/;
# TSAN=1 with ThreadSanitizer into build-tsan/ (tests/tsan.mk: what it runs).
#
# Pieces own their own fragments (*.mk), included below, so adding a tool or a
# workload never edits this file.

CC       ?= gcc
PREFIX   ?= /usr/local
DESTDIR  ?=
PYTHON   ?= python3

ifeq ($(SANITIZE),1)
BUILD    ?= build-san
OPT      := -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDSAN    := -fsanitize=address,undefined
else ifeq ($(TSAN),1)
BUILD    ?= build-tsan
OPT      := -O1 -fsanitize=thread -fno-omit-frame-pointer
LDSAN    := -fsanitize=thread
else
BUILD    ?= build
OPT      := -O2
LDSAN    :=
endif
# The build's Python environment (tools/tools.mk): every Python tool and test runs in it.
VENV     := $(BUILD)/venv
VENV_PY  := $(VENV)/bin/python

CFLAGS   ?= -g
CFLAGS   += -std=c11 -D_GNU_SOURCE $(OPT) -Wall -Wextra -Wno-unused-parameter \
            -fPIC -pthread -fvisibility=hidden -ftls-model=initial-exec \
            -fno-strict-aliasing -ffunction-sections -Iinclude $(EXTRA_CFLAGS)
LDFLAGS  += -pthread $(LDSAN)
LDLIBS   += -ldl -lm

LIB_SRC   := $(sort $(shell find src -name '*.c' -not -path 'src/imas/*'))
CORE_SRC  := $(filter-out src/malloc/%,$(LIB_SRC))
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CORE_OBJ  := $(CORE_SRC:%.c=$(BUILD)/obj/%.o)
HEADERS   := $(shell find include src -name '*.h')

TEST_SRC  := $(sort $(wildcard tests/unit/*.c tests/stress/*.c tests/integration/*.c))
TEST_BIN  := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
BENCH_SRC := $(sort $(wildcard bench/*.c))
BENCH_BIN := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))

.PHONY: all lib tests benches test bench install clean
all: lib tests benches

lib: $(BUILD)/libslabkit.so $(BUILD)/libslabkit.a $(BUILD)/libslabkit_core.a

# The Makefile too: a change of flags (say -ffunction-sections, which
# src/layout.ld needs) must not leave objects built without it.
$(BUILD)/obj/%.o: %.c $(HEADERS) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# Relative relocations packed (DT_RELR: binutils 2.38, glibc 2.36) where the
# toolchain has them: 120 bytes of table instead of 10 KiB, so the library's
# first segment is two resident pages in every process, not four.
# Both probes use the link's own flags: a linker chosen there (gold has
# neither) must not be handed an option only the default one knows.
LDRELR := $(shell $(CC) $(LDFLAGS) -shared -Wl,--fatal-warnings,-z,pack-relative-relocs -x c /dev/null -o /dev/null 2>/dev/null && echo -Wl,-z,pack-relative-relocs)

# src/layout.ld puts the code every program runs first in the text, so that
# it is resident in one or two 64 KiB fault-around windows, not the whole text.
# With the segments aligned to 64 KiB (the loader, glibc 2.35 on, then loads
# the library at a 64 KiB boundary), the hot code starts a window too: one
# window resident wherever the library lands, not one or two by chance.
LDLAYOUT := $(shell $(CC) $(LDFLAGS) -shared -Wl,--fatal-warnings,-T,src/layout.ld -x c /dev/null -o /dev/null 2>/dev/null && echo -Wl,-T,src/layout.ld -Wl,-z,max-page-size=0x10000)

$(BUILD)/libslabkit.so: $(LIB_OBJ) src/layout.ld
	$(CC) -shared -o $@ $(LIB_OBJ) $(LDFLAGS) $(LDRELR) -Wl,-z,nodelete $(LDLAYOUT)

$(BUILD)/libslabkit.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# The core without the malloc overrides: unit tests link it and keep glibc's malloc.
$(BUILD)/libslabkit_core.a: $(CORE_OBJ)
	@rm -f $@
	ar rcs $@ $^

tests: $(TEST_BIN)
# Unit and stress tests link the core (kmem, pages) and keep the system malloc;
# integration tests are plain programs that run under LD_PRELOAD or link the .so.
$(BUILD)/tests/unit/% $(BUILD)/tests/stress/%: tests/*/%.c $(wildcard tests/*.h) $(BUILD)/libslabkit_core.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Isrc -o $@ $< $(BUILD)/libslabkit_core.a $(LDFLAGS) $(LDLIBS)
$(BUILD)/tests/integration/%: tests/integration/%.c $(wildcard tests/*.h tests/integration/*.h) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) $(LDLIBS)

benches: $(BENCH_BIN)
$(BUILD)/bench/%: bench/%.c $(BUILD)/libslabkit_core.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Isrc -o $@ $< $(BUILD)/libslabkit_core.a $(LDFLAGS) $(LDLIBS)

-include $(sort $(wildcard src/*/*.mk tools/*.mk bench/*.mk tests/*.mk tests/*/*.mk))

# make test and make bench do their own set-up: before anything is built, what
# they need from Debian (tools/debian-deps.sh names it) is installed, or make
# stops with the command to run; the Python side is $(VENV) (tools/tools.mk).
ifneq ($(filter test bench,$(MAKECMDGOALS)),)
ifneq ($(shell tools/debian-deps.sh >&2 && echo ok),ok)
$(error make $(filter test bench,$(MAKECMDGOALS)) needs the Debian packages named above)
endif
endif

test: all
	$(VENV_PY) tests/run.py --build $(BUILD) $(if $(filter 1,$(SANITIZE)),--sanitize) $(TEST_ARGS)

bench: all
	$(VENV_PY) bench/run_default.py --build $(BUILD)

VERSION  ?= 0.1.0
install: all
	install -d $(DESTDIR)$(PREFIX)/include/slabkit $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/bin \
	           $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/lib/cmake/slabkit
	install -m 644 include/slabkit/*.h $(DESTDIR)$(PREFIX)/include/slabkit/
	install -m 755 $(BUILD)/libslabkit.so $(DESTDIR)$(PREFIX)/lib/
	install -m 644 $(BUILD)/libslabkit.a $(DESTDIR)$(PREFIX)/lib/
	if [ -f $(BUILD)/libimas.so ]; then install -m 755 $(BUILD)/libimas.so $(DESTDIR)$(PREFIX)/lib/; fi
	for f in $(wildcard $(BUILD)/bin/*); do install -m 755 $$f $(DESTDIR)$(PREFIX)/bin/; done
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' slabkit.pc.in \
	    > $(DESTDIR)$(PREFIX)/lib/pkgconfig/slabkit.pc
	sed -e 's|@VERSION@|$(VERSION)|g' cmake/slabkitConfig.cmake.in \
	    > $(DESTDIR)$(PREFIX)/lib/cmake/slabkit/slabkitConfig.cmake
	sed -e 's|@VERSION@|$(VERSION)|g' cmake/slabkitConfigVersion.cmake.in \
	    > $(DESTDIR)$(PREFIX)/lib/cmake/slabkit/slabkitConfigVersion.cmake

clean:
	rm -rf build build-san build-tsan
