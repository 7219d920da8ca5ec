"""IMAS — the intelligent memory allocator selector (Ülgen and Avcı, 2015),
rebuilt for slabkit: tests every program with every candidate allocator on
what users pay (whole runs' time and memory, measured from outside), ranks
the fastest, the most memory-efficient and the balanced one, and gives each
new process the right one for the system's state (docs/imas.md).

Modules: paths (state layout, security checks), keys (programs as users
name them; versions), candidates (which allocators), logs (test records),
db (SQLite statistics), ranking, policy, daemon (imasd: folding, plans,
decision files), cli (imas), exchange (export/import), evaluate (IMAS
against every single allocator).  The allocators, the real programs and the
measurement come from the slabkit package around it (registry, programs,
measure, metrics)."""
