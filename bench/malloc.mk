# bench/malloc.mk — the malloc benchmark: a plain program (not linked with the
# slabkit core; it preloads each allocator into re-executions of itself).
.PHONY: mallocbench
all: mallocbench
mallocbench: $(BUILD)/bench/mallocbench $(BUILD)/bench/libfloor.so \
             $(patsubst bench/malloc/traces/%.sktrace.gz,$(BUILD)/bench/traces/%.sktrace,$(wildcard bench/malloc/traces/*.sktrace.gz))
$(BUILD)/bench/mallocbench: bench/malloc/mallocbench.c tools/record/trace.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) $(LDLIBS)
# The null allocator mallocbench measures as its harness's floor (floor.c).
$(BUILD)/bench/libfloor.so: bench/malloc/floor.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fPIC -shared -o $@ $<
# The recorded traces mallocbench replays (kept compressed in the tree; the
# lab replays them too: slabkit bench --trace build/bench/traces/NAME.sktrace).
$(BUILD)/bench/traces/%.sktrace: bench/malloc/traces/%.sktrace.gz
	@mkdir -p $(dir $@)
	gzip -dc $< > $@.tmp && mv $@.tmp $@
