# designbench runs every design, so it links the whole core archive
# (--whole-archive): every design's objects are in, whatever the core itself
# happens to reference.
$(BUILD)/bench/designbench: bench/designbench.c $(BUILD)/libslabkit_core.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Isrc -o $@ $< -Wl,--whole-archive $(BUILD)/libslabkit_core.a -Wl,--no-whole-archive $(LDFLAGS) $(LDLIBS)
