# designbench runs every design, so it links the whole core: cache.c refers to
# the designs weakly (an unbuilt one falls back), and a weak reference pulls
# nothing out of a static archive.
$(BUILD)/bench/designbench: bench/designbench.c $(BUILD)/libslabkit_core.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Isrc -o $@ $< -Wl,--whole-archive $(BUILD)/libslabkit_core.a -Wl,--no-whole-archive $(LDFLAGS) $(LDLIBS)
