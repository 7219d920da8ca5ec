# tools.mk — the Python tools and the allocator lab (included by the top
# Makefile): the build's Python environment $(VENV) with the package of
# tools/pyproject.toml in it, the commands $(BUILD)/bin/slabkit, imas and imasd
# (links to its console scripts), the workload programs
# $(BUILD)/bench/workloads/*, the trace recorder $(BUILD)/libslabkit_record.so,
# the replayer, $(BUILD)/libexec/slabkit-spawn (slabkit.measure starts
# measured commands through it; static, so its own resident set is tiny) and
# $(BUILD)/libexec/slabkit-designs and slabkit-classes (the library's designs
# and generic size classes, for the tools).
#
# The workloads and the recorder never link slabkit and are built without
# sanitizers even when SANITIZE=1: they run under other allocators through
# LD_PRELOAD, which ASan's own malloc would shadow.

LAB_CFLAGS := $(filter-out -fsanitize=% -fno-sanitize-recover=% -O0 -O1 -O3,$(CFLAGS)) -O2
LAB_WL_SRC := $(sort $(wildcard bench/workloads/*.c))
LAB_WL_BIN := $(patsubst bench/workloads/%.c,$(BUILD)/bench/workloads/%,$(LAB_WL_SRC)) \
              $(BUILD)/bench/workloads/replay
PY_BIN     := $(BUILD)/bin/slabkit $(BUILD)/bin/imas $(BUILD)/bin/imasd

.PHONY: lab venv
all: lab
lab: $(BUILD)/bin/slabkit $(LAB_WL_BIN) $(BUILD)/libslabkit_record.so $(BUILD)/libexec/slabkit-spawn \
     $(BUILD)/libexec/slabkit-designs $(BUILD)/libexec/slabkit-classes
venv: $(VENV)/slabkit-build

# The environment: made from $(PYTHON) the first time it is needed, brought up
# to date when the requirements or the package's definition change.  The
# package is installed editable, so edits to tools/slabkit need no step.  The
# file slabkit-build marks the environment as this build's (slabkit.env).
$(VENV)/slabkit-build: tools/requirements.txt tools/pyproject.toml
	@$(PYTHON) -c 'import ensurepip' 2>/dev/null || { echo "make: $(PYTHON) cannot make a virtual environment (no ensurepip): install python3-venv (make test does)" >&2; exit 1; }
	@[ -x $(VENV_PY) ] || { echo "  VENV $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@PIP_DISABLE_PIP_VERSION_CHECK=1 $(VENV_PY) -m pip install -q -r tools/requirements.txt
	@PIP_DISABLE_PIP_VERSION_CHECK=1 $(VENV_PY) -m pip install -q --no-deps --no-build-isolation -e tools
	@touch $@

$(PY_BIN): | $(VENV)/slabkit-build
	@mkdir -p $(dir $@)
	@ln -sfn ../venv/bin/$(notdir $@) $@

$(BUILD)/bench/workloads/%: bench/workloads/%.c bench/workloads/wl.h
	@mkdir -p $(dir $@)
	$(CC) $(LAB_CFLAGS) -o $@ $< -pthread -lm

$(BUILD)/bench/workloads/replay: tools/record/replay.c tools/record/trace.h
	@mkdir -p $(dir $@)
	$(CC) $(LAB_CFLAGS) -o $@ $< -pthread

$(BUILD)/libslabkit_record.so: tools/record/record.c tools/record/trace.h
	@mkdir -p $(dir $@)
	$(CC) $(LAB_CFLAGS) -shared -o $@ $< -pthread -ldl

# The library's list of designs, for the tools and scripts (tools/designs).
$(BUILD)/libexec/slabkit-designs: tools/designs/designs.c $(BUILD)/libslabkit_core.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libslabkit_core.a $(LDFLAGS) $(LDLIBS)

# ...and its generic size classes (tools/classes: reads an internal table).
$(BUILD)/libexec/slabkit-classes: tools/classes/classes.c $(BUILD)/libslabkit_core.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Isrc -o $@ $< $(BUILD)/libslabkit_core.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/libexec/slabkit-spawn: tools/spawn/spawn.c
	@mkdir -p $(dir $@)
	$(CC) $(LAB_CFLAGS) -static -o $@ $< || $(CC) $(LAB_CFLAGS) -o $@ $<
