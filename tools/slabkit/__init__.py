"""slabkit — the allocator lab's Python package (the `slabkit` command line).

metrics.py holds the measurement definitions shared with IMAS; allocators.py,
workloads.py, runner.py and report.py are the lab; trace.py reads the traces
of `slabkit record`; stats.py is `slabkit stats`; cli.py the command line."""
