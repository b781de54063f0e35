"""The optional C extensions that read StepRecords by position: loaded where built and allowed.

`make install` compiles them (setup.py); without a compiler the install still succeeds and each
user runs its Python reference, which gives the same results. A build made from another
StepRecord layout would read the wrong fields, so every extension exports RECORD_LAYOUT (the
fields it reads, by name and index) and is refused unless records.py has them there. Each user
then checks the constants of its own (analysis.native: the number of phases; transport.wire.codec:
the number of fields).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from traceml.config import c_enabled
from traceml.records import StepRecord


def load(name: str) -> ModuleType | None:
    """The extension module `name` when built, TRACEML_C_TIMER is not 0 (config.c_enabled) and
    its RECORD_LAYOUT matches StepRecord's fields; else None. (importlib: a static import of an
    extension module confuses the layer checker.)"""
    if not c_enabled():
        return None
    try:
        c = importlib.import_module(name)
    except ImportError:  # not built (no compiler at install)
        return None
    fields = StepRecord._fields
    layout = getattr(c, "RECORD_LAYOUT", ())
    if not layout or any(i >= len(fields) or fields[i] != field for field, i in layout):
        return None
    return c
