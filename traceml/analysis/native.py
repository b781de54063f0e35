"""The optional C folds (_fold.c): loaded once, used where built and allowed.

`make install` compiles them; without a compiler the install still succeeds and every fold runs
its Python reference, which gives the same floats (tests/unit/test_fold_native.py). Each user
checks the constants its layout relies on, so a stale build is never used.
"""

from __future__ import annotations

from types import ModuleType

from traceml.extensions import load
from traceml.records import PHASES


def fold_module() -> ModuleType | None:
    """traceml.analysis._fold when built and allowed (extensions.load: TRACEML_C_TIMER, the
    record layout) and built for as many phases as records.py has (else a stale build: None)."""
    c = load("traceml.analysis._fold")
    return c if c is not None and len(PHASES) == c.N_PHASES else None
