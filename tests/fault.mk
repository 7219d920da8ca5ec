# tests/fault.mk — the fault-injection test (tests/unit/test_fault.c) links a
# core of its own, built with the test-only hook (-DSK_FAULT_INJECT,
# src/os/os.h) into $(BUILD)/fault/; the library and every other program
# are built without it.
FAULT_OBJ := $(CORE_SRC:%.c=$(BUILD)/fault/%.o)

$(BUILD)/fault/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DSK_FAULT_INJECT -c $< -o $@

$(BUILD)/libslabkit_fault.a: $(FAULT_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/tests/unit/test_fault: tests/unit/test_fault.c $(wildcard tests/*.h) $(BUILD)/libslabkit_fault.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DSK_FAULT_INJECT -Isrc -o $@ $< $(BUILD)/libslabkit_fault.a $(LDFLAGS) $(LDLIBS)
