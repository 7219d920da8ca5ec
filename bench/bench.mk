# bench/bench.mk — what every benchmark program shares: bench/bench.h.
$(BENCH_BIN) $(BUILD)/bench/mallocbench: bench/bench.h
