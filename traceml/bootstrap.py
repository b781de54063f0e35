"""Child side of `traceml run`: start TraceML, then run the script exactly as `python script.py`.

Same `sys.argv`, `sys.path[0]` and `__name__ == "__main__"`; the script's exit code is ours, and
its traceback is shown without TraceML's own frames. Invoked as `python -m traceml.bootstrap`.
"""

from __future__ import annotations

import os
import runpy
import sys
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
