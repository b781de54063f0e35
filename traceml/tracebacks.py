"""Tracebacks as the user's code made them: TraceML's own frames taken out.

TraceML's wrappers (the DataLoader and backward patches; the forward patch where it wraps
`nn.Module.__call__`) sit on the stack between the user's frames, and `traceml run` runs the
script under a bootstrap and runpy. (Where the forward patch swaps the code of torch's own
`__call__` instead, its frames are torch's, at torch's lines: nothing to take out.) A traceback
that reaches the user through TraceML's excepthook or the bootstrap is printed without those
frames, so it reads exactly as without TraceML. This module must never raise: on any
trouble the traceback is left as it was.
"""

from __future__ import annotations

import os
from types import TracebackType

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def is_ours(filename: str) -> bool:
    """True for a file of the traceml package (not traceml_tui, not the user's code)."""
    return os.path.abspath(filename).startswith(_PACKAGE)


def _ours(tb: TracebackType) -> bool:
    return is_ours(tb.tb_frame.f_code.co_filename)


def without_ours(tb: TracebackType | None, start_in: str | None = None) -> TracebackType | None:
    """`tb` without TraceML's frames; with `start_in`, also without the frames before the first
    one of that file (the bootstrap's and runpy's, above the script). None stays None."""
    kept: list[TracebackType] = []
    cur, started = tb, start_in is None
    while cur is not None:
        filename = cur.tb_frame.f_code.co_filename
        started = started or os.path.abspath(filename) == start_in
        if started and not _ours(cur):
            kept.append(cur)
        cur = cur.tb_next
    if not kept:
        return tb
    out: TracebackType | None = None
    for frame in reversed(kept):
        out = TracebackType(out, frame.tb_frame, frame.tb_lasti, frame.tb_lineno)
    return out


def strip_exception(error: BaseException, start_in: str | None = None) -> None:
    """Take TraceML's frames out of `error` and of every exception chained to it, in place."""
    seen: set[int] = set()
    todo: list[tuple[BaseException, str | None]] = [(error, start_in)]
    try:
        while todo:
            exc, start = todo.pop()
            if id(exc) in seen:
                continue
            seen.add(id(exc))
            exc.__traceback__ = without_ours(exc.__traceback__, start)
            todo += [(e, None) for e in (exc.__cause__, exc.__context__) if e is not None]
    except Exception:  # noqa: BLE001 - a traceback with our frames beats none at all
        return
