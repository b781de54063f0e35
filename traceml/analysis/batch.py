"""What a batch of step records is, found in one pass before the store folds it.

A rank's tx thread folds a tick's records (about 600 at a 0.4 ms step) into its RunStore, and a
viewer folds every rank's. Before folding, the store needs a few facts about the batch: whether it
is one rank's, whether its steps are strictly ascending (the batched fold's condition), how many
of its steps overlapped TraceML's own work, whether any waited on DDP's all-reduce, and which is
its last step due a prune. Asked one by one, in list comprehensions, they were six passes of
Python over the batch; `facts_of` answers them in one pass of C (_fold.c's batch_facts) where it
is built, with `batch_facts` below as its reference. Pure: no I/O, no clock.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import NamedTuple

from traceml.analysis.native import fold_module
from traceml.records import StepRecord


class BatchFacts(NamedTuple):
    """Facts of a non-empty batch of step records."""

    rank: int
    """The rank of every record; -1 when they are of several ranks."""
    ascending: bool
    """Whether the steps are strictly ascending (no late, repeated or unordered step)."""
    held: int
    """Records that overlapped TraceML's own work (held_ms not None)."""
    comm: bool
    """Whether any record measured DDP's all-reduce wait (comm_wait_ms not None)."""
    due: int
    """The last step whose bits under `mask` are all 0 (a prune is due there); -1 if none."""


def batch_facts(records: Sequence[StepRecord], mask: int) -> BatchFacts:
    """The facts of `records` (non-empty), in Python: the reference of _fold.c's batch_facts."""
    steps = [r.step for r in records]
    rank = records[0].rank
    due = [s for s in steps if not s & mask]
    return BatchFacts(
        rank=rank if all(r.rank == rank for r in records) else -1,
        ascending=all(map(operator.lt, steps, steps[1:])),
        held=sum(r.held_ms is not None for r in records),
        comm=any(r.comm_wait_ms is not None for r in records),
        due=due[-1] if due else -1,
    )


_C_FACTS = getattr(fold_module(), "batch_facts", None)


def facts_of(records: Sequence[StepRecord], mask: int) -> BatchFacts:
    """The facts of `records` (non-empty): in C when it is built and models them (a list of
    StepRecords whose ranks and steps are ints), else in Python."""
    if _C_FACTS is not None and isinstance(records, list):
        got = _C_FACTS(records, mask)
        if got is not None:
            return BatchFacts(*got)
    return batch_facts(records, mask)
