# tests/tsan.mk — what `make test TSAN=1` runs: the ThreadSanitizer build
# (build-tsan/, flags in the Makefile) runs the stress tests, which drive the
# kmem and page APIs from many threads and keep the system malloc (TSan
# replaces malloc itself, so the preloaded tests cannot run under it), over
# every design and page allocator.  A report fails the test (exitcode); the
# races the code has on purpose are marked SK_RACY_READS where they are
# (tests/tsan.supp says why that and not suppressions).
ifeq ($(TSAN),1)
TEST_ARGS += --sanitize --no-pytest --only '^stress/' --timeout-scale 5   # TSan runs them 20-30x slower
export TSAN_OPTIONS ?= halt_on_error=1 exitcode=66 second_deadlock_stack=1 \
                       suppressions=$(CURDIR)/tests/tsan.supp
endif
