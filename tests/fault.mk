# tests/fault.mk — the fault-injection test (tests/unit/test_fault.c) links a
# core of its own, built with the test-only hook (-DSK_FAULT_INJECT,
# src/os/os.h) into $(BUILD)/fault/; the library and every other program
# are built without it.  The malloc layer's internals come too (for
# realloc's paths), without override.c: the test keeps the system malloc.
FAULT_SRC := $(CORE_SRC) src/malloc/malloc.c src/malloc/init.c
FAULT_OBJ := $(FAULT_SRC:%.c=$(BUILD)/fault/%.o)

$(BUILD)/fault/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DSK_FAULT_INJECT -c $< -o $@

$(BUILD)/libslabkit_fault.a: $(FAULT_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/tests/unit/test_fault: tests/unit/test_fault.c $(wildcard tests/*.h) $(BUILD)/libslabkit_fault.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DSK_FAULT_INJECT -Isrc -o $@ $< $(BUILD)/libslabkit_fault.a $(LDFLAGS) $(LDLIBS)
