"""refine: measure profiles against the kernel's default scheduler and search for better ones.

Two rooms and the record on top (docs/refine.md "Where the code lives"):
- `measure/`: the workload, the ladder (plan, run in the lab or on the host, ingest, validity) and
  its ladder file, and the one judge (judge.py, with stats.py as its internals). It knows nothing
  of a search.
- `search/`: the mutation search (loop, candidates, mutations, the guide and the diagnosis); it
  asks `measure` for ladders and decides from the rows the judge stored.
- on top: `train` (observe -> analyze -> synthesize -> the search), the record (`report`, `plots`,
  `outcome`, `evidence`, `rejudge`) and the CLI.
"""
