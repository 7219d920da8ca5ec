# bench/malloc.mk — the malloc benchmark: a plain program (not linked with the
# slabkit core; it preloads each allocator into re-executions of itself).
.PHONY: mallocbench
all: mallocbench
mallocbench: $(BUILD)/bench/mallocbench
$(BUILD)/bench/mallocbench: bench/malloc/mallocbench.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) $(LDLIBS)
