# bench/limits.mk — the memory-limit benchmark's program (bench/limits.py
# runs it): a plain program, never linked with slabkit nor built with
# sanitizers, since it runs under each allocator through LD_PRELOAD.
LIMITS_CFLAGS := $(filter-out -fsanitize=% -fno-sanitize-recover=% -O0 -O1 -O3,$(CFLAGS)) -O2
all: $(BUILD)/bench/limitfill
$(BUILD)/bench/limitfill: bench/limits/limitfill.c
	@mkdir -p $(dir $@)
	$(CC) $(LIMITS_CFLAGS) -o $@ $<
