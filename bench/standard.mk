# bench/standard.mk — the standard allocator benchmark programs (bench/standard/,
# modelled on mimalloc-bench's set), run by the lab: slabkit bench --suite standard.
# Plain malloc programs built as the lab's workloads are (LAB_CFLAGS, tools.mk):
# they run under other allocators through LD_PRELOAD.
STD_SRC := $(sort $(wildcard bench/standard/*.c))
STD_BIN := $(patsubst bench/standard/%.c,$(BUILD)/bench/standard/%,$(STD_SRC))

.PHONY: standard
all: standard
standard: $(STD_BIN)
$(BUILD)/bench/standard/%: bench/standard/%.c bench/workloads/wl.h
	@mkdir -p $(dir $@)
	$(CC) $(LAB_CFLAGS) -o $@ $< -pthread -lm
