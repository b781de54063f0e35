"""Everything that runs inside the training process: timing, hooks, memory, system, tx thread."""
