# bench/malloc.mk — the malloc benchmark: a plain program (not linked with the
# slabkit core; it preloads each allocator into re-executions of itself).
.PHONY: mallocbench
all: mallocbench
mallocbench: $(BUILD)/bench/mallocbench $(BUILD)/bench/libfloor.so
$(BUILD)/bench/mallocbench: bench/malloc/mallocbench.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) $(LDLIBS)
# The null allocator mallocbench measures as its harness's floor (floor.c).
$(BUILD)/bench/libfloor.so: bench/malloc/floor.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fPIC -shared -o $@ $<
