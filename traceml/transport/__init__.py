"""Live transport of one run, in four floors (import-linter keeps them in this order).

- `wire`: frames, control requests, CURVE keys, events (shared by both ends);
- `runfiles`: the private runtime dir, run and rank files, run ids, the rank lock;
- `publish` (the rank's tx thread) and `subscribe` (viewers), independent of each other.

The job collector and its relays live above in `traceml.collect`. Importing this package loads
nothing heavy and never imports torch or textual.
"""
