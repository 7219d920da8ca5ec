# tests/fuzz/fuzz.mk — `make fuzz`: the libFuzzer harness, built with clang,
# ASan and coverage over the whole library core (into build-fuzz/).
FUZZ_BUILD := build-fuzz
FUZZ_CC    := clang
FUZZ_FLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer-no-link,address,undefined \
              -fno-omit-frame-pointer -pthread -ftls-model=initial-exec -Iinclude -Isrc
FUZZ_SRC   := $(CORE_SRC) src/malloc/malloc.c src/malloc/init.c

.PHONY: fuzz
fuzz: $(FUZZ_BUILD)/fuzz_alloc

$(FUZZ_BUILD)/fuzz_alloc: tests/fuzz/fuzz_alloc.c $(FUZZ_SRC) $(HEADERS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer -o $@ tests/fuzz/fuzz_alloc.c $(FUZZ_SRC) -ldl -lm
