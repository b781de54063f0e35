"""The optional C folds (_fold.c): loaded once, used where built and allowed.

`make install` compiles them; without a compiler the install still succeeds and every fold runs
its Python reference, which gives the same floats (tests/unit/test_fold_native.py). Each user
checks the constants its layout relies on, so a stale build is never used.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from traceml.config import c_enabled
from traceml.records import PHASES, StepRecord


def fold_module() -> ModuleType | None:
    """traceml.analysis._fold when built, TRACEML_C_TIMER is not 0 (config.c_enabled) and it
    reads StepRecord's fields where records.py has them, with as many phases (else a stale
    build: None). (importlib: a static import of an extension module confuses the layer
    checker.)"""
    if not c_enabled():
        return None
    try:
        c = importlib.import_module("traceml.analysis._fold")
    except ImportError:  # not built (no compiler at install)
        return None
    fields = StepRecord._fields
    layout = getattr(c, "RECORD_LAYOUT", ())
    if not layout or any(i >= len(fields) or fields[i] != name for name, i in layout):
        return None
    return c if len(PHASES) == c.N_PHASES else None
