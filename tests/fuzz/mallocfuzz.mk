# tests/fuzz/mallocfuzz.mk — the malloc-family fuzzer (mallocfuzz.c): a plain
# program that tests whatever malloc it runs under (LD_PRELOAD), so it is
# built without sanitizers; tests/fuzz/mallocfuzz.sh runs it over every
# design and page allocator.
MALLOCFUZZ_CFLAGS := $(filter-out -fsanitize=% -fno-sanitize-recover=% -O0 -O1 -O3,$(CFLAGS)) -O2
all: $(BUILD)/tests/fuzz/mallocfuzz
$(BUILD)/tests/fuzz/mallocfuzz: tests/fuzz/mallocfuzz.c
	@mkdir -p $(dir $@)
	$(CC) $(MALLOCFUZZ_CFLAGS) -o $@ $< -pthread
