"""The allocator lab (docs/lab.md): allocators.py (which allocators a run
compares), workloads.py, runner.py (runs and measures), report.py (tables,
CSV, plots), trace.py (the traces of `slabkit record`), stats.py (`slabkit
stats`), cli.py (the `slabkit` command)."""
