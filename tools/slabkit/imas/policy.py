"""policy.py — which allocator a process gets at start-up (the paper's
Algorithm 1, corrected).  src/imas/decision.c applies the same rule in the
preload-only shim; keep the two in step.

  pinned (imas pin, imas exclude)                  -> that allocator       (rule "pinned")
  runs too short to matter                         -> the system allocator ("short")
  test mode                                        -> the next allocator to test ("test")
  load per CPU >= 0.75 and free >= fastest's peak RSS    -> fastest        ("busy")
  free < balanced's peak RSS (busy or not)         -> most memory-efficient ("memory-short")
  otherwise                                        -> balanced             ("balanced")

Load is the 5-minute load average divided by the number of CPUs (the paper
did not divide); free memory is MemAvailable (page cache counts as free);
footprints are the peak resident set measured in the tests.  IMAS_ASSUME_LOAD (per CPU)
and IMAS_ASSUME_FREE_MB override what is read, for tests and what-if questions.
"""
import os

BUSY = 0.75


class SystemState:
    def __init__(self, load, free, load_src="", free_src=""):
        self.load, self.free, self.load_src, self.free_src = load, free, load_src, free_src

    def describe(self):
        return (f"load {self.load:.2f} per CPU ({self.load_src}), "
                f"free memory {self.free / 1048576:.0f} MiB ({self.free_src})")


def _float_env(name):
    v = os.environ.get(name)
    if v is None or v == "":
        return None
    try:
        x = float(v)
    except ValueError:
        raise ValueError(f"{name}={v!r} is not a number")
    if x != x or x < 0:
        raise ValueError(f"{name}={v!r} must be a non-negative number")
    return x


def read_state():
    load = _float_env("IMAS_ASSUME_LOAD")
    if load is not None:
        load_src = "IMAS_ASSUME_LOAD"
    else:
        five = os.getloadavg()[1]
        cpus = os.cpu_count() or 1
        load, load_src = five / cpus, f"5-min load {five:.2f} / {cpus} CPUs"
    mb = _float_env("IMAS_ASSUME_FREE_MB")
    if mb is not None:
        free, free_src = int(mb * 1048576), "IMAS_ASSUME_FREE_MB"
    else:
        free, free_src = _mem_available(), "MemAvailable"
    return SystemState(load, free, load_src, free_src)


def _mem_available():
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f if ":" in line)
        key = "MemAvailable" if "MemAvailable" in info else "MemFree"
        return int(info[key].split()[0]) * 1024
    except (OSError, ValueError, KeyError):
        return 1 << 62


class Choice:
    def __init__(self, allocator, rule, why):
        self.allocator, self.rule, self.why = allocator, rule, why

    def __repr__(self):
        return f"Choice({self.allocator!r}, {self.rule!r})"


def choose(plan, state):
    """plan: a daemon.Plan (mode, next, pinned, fastest, efficient, balanced, footprint{name: bytes})."""
    if plan.mode == "pin":
        return Choice(plan.pinned, "pinned", plan.why)
    if plan.mode == "short":
        return Choice("system", "short", plan.why)
    if plan.mode == "test":
        return Choice(plan.next, "test", f"test mode: {plan.next} is the next allocator to test "
                      f"({plan.why})")
    if plan.balanced is None:
        return Choice("system", "no-data", plan.why or "no usable test results yet")
    fp = plan.footprint
    if state.load >= BUSY and plan.fastest and state.free >= fp.get(plan.fastest, 0):
        return Choice(plan.fastest, "busy",
                      f"the system is busy (load {state.load:.2f} >= {BUSY}) and free memory "
                      f"({state.free / 1048576:.0f} MiB) covers {plan.fastest}'s peak resident set "
                      f"(peak {fp.get(plan.fastest, 0) / 1048576:.1f} MiB): the fastest")
    if plan.efficient and state.free < fp.get(plan.balanced, 0):
        return Choice(plan.efficient, "memory-short",
                      f"free memory ({state.free / 1048576:.0f} MiB) is below the balanced choice's "
                      f"peak ({fp.get(plan.balanced, 0) / 1048576:.1f} MiB): "
                      f"the most memory-efficient")
    busy = state.load >= BUSY
    return Choice(plan.balanced, "balanced",
                  ("busy, but free memory does not cover the fastest's footprint" if busy else
                   f"the system is not busy (load {state.load:.2f} < {BUSY})") +
                  " and memory is sufficient: the balanced one")
