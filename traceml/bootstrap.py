"""Child side of `traceml run`: start TraceML, then run the script exactly as `python script.py`.

Same `sys.argv`, `sys.path[0]` and `__name__ == "__main__"`; the script's exit code is ours, and
its traceback is shown without TraceML's own frames. Invoked as `python -m traceml.bootstrap`.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import time
import traceback
from collections.abc import Callable
from types import TracebackType
from typing import Any

from traceml.tracebacks import strip_exception


def _trimming(previous: Callable[..., Any], script: str) -> Callable[..., Any]:
    """An excepthook that prints what reaches it (a KeyboardInterrupt, the script's own
    excepthook's business) starting in the script, without TraceML's frames."""

    def hook(etype: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        if value is not None and value.__traceback__ is tb:
            strip_exception(value, script)
            tb = value.__traceback__
        previous(etype, value, tb)

    return hook


REPEAT_INTERRUPT_S = 0.5
"""Under `traceml run`, a SIGINT this soon after the last one is the same interrupt arriving
twice: once to the process group (Ctrl-C without a terminal, `timeout`, a scheduler) and once
forwarded by the launcher, which cannot tell a group's signal from one sent to it alone.
Raised again, it would cut short the script's own `except KeyboardInterrupt` clean-up, or the
summary being written at exit."""


def _interrupt_once(window_s: float) -> Callable[[int, Any], None]:
    """A SIGINT handler as Python's own, except that a repeat within `window_s` is dropped."""
    last = -window_s

    def handler(_signum: int, _frame: Any) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last < window_s:
            return
        last = now
        raise KeyboardInterrupt

    return handler


def _absorb_forwarded_interrupts() -> None:
    if os.environ.get("TRACEML_LAUNCHER") != "1":
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupt_once(REPEAT_INTERRUPT_S))


def _mark_exit(kind: str, error: BaseException | None = None) -> None:
    from traceml.api import current_session

    session = current_session()
    if session is not None:
        session.exit = kind  # type: ignore[assignment]
        if error is not None:
            session.note_error(error)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m traceml.bootstrap script.py [args...]", file=sys.stderr)
        return 2
    script = os.path.abspath(argv[0])
    sys.argv = [argv[0], *argv[1:]]
    sys.path[0] = os.path.dirname(script)
    from traceml.api import init_for_run

    init_for_run(os.environ.get("TRACEML_MODE", "auto"))
    sys.excepthook = _trimming(sys.excepthook, script)
    _absorb_forwarded_interrupts()
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            _mark_exit("error")
        raise
    except KeyboardInterrupt:
        _mark_exit("signal")
        raise
    except BaseException as e:  # noqa: BLE001 - the script's own error, shown as Python would
        _mark_exit("error", e)
        strip_exception(e, script)
        traceback.print_exception(type(e), e, e.__traceback__)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
