"""slabkit.prof — the heap profiler's tools: `slabkit prof PID` (a running
process's profile), `slabkit prof run -- CMD`, `slabkit prof report FILE`
and `slabkit prof folded FILE`.  The library side is src/prof."""
