"""IMAS — the intelligent memory allocator selector (Ülgen and Avcı, 2015),
rebuilt for slabkit: tests every program with every candidate allocator,
ranks the fastest, the most memory-efficient and the balanced one, and gives
each new process the right one for the system's state.

Modules: paths (state layout, security checks), candidates (which allocators),
logs (probe-log validation), db (SQLite statistics), ranking, policy,
daemon (imasd), cli (imas), evaluate (the Figure 8 comparison).  The
allocators, the real programs and the measurement come from the slabkit
package around it (registry, programs, metrics)."""
