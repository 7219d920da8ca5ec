"""slabkit — the Python tools of slabkit, one package (tools/pyproject.toml):

  lab/        the allocator lab: the `slabkit` command (bench, report, stats,
              record, replay, allocators, workloads)
  imas/       IMAS, the allocator selector: the `imas` and `imasd` commands
  registry    the one list of allocators: slabkit's designs and page
              allocators, the peer allocators and where their libraries are
  programs    the real programs run under each allocator
  metrics     the measurement definitions shared by the lab and IMAS
  env         where the source tree and the build are; the environment of a
              measured program
"""
