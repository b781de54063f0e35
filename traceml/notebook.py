"""TraceML inside a Jupyter kernel: the rich card, and no step counting the time between cells.

A notebook's loop runs in pieces, one cell at a time; the time a person spends between two cells
is not training. Before each cell the step timer is told to rest, so the next step starts at the
cell's first event instead of at the end of the previous cell's last step. Nothing here runs
outside IPython, and nothing here imports IPython unless it is already loaded.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from traceml.probe import warn_once


def kernel_shell() -> Any:
    """The running IPython kernel's shell, or None outside a Jupyter kernel (scripts, a plain
    IPython terminal)."""
    if "IPython" not in sys.modules:
        return None
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except Exception:  # noqa: BLE001 - an unusable IPython means "not a notebook"
        return None
    return shell if shell is not None and getattr(shell, "kernel", None) is not None else None


def watch_cells(rest: Callable[[], None], active: Callable[[], bool]) -> bool:
    """Call `rest()` before each cell while `active()`; True when a kernel was found.

    Args:
        rest: Forgets the time since the last step (the step timer's `rest`).
        active: False once TraceML shut down: the callback then does nothing.
    """
    shell = kernel_shell()
    if shell is None:
        return False

    def before_cell(*_: Any) -> None:
        if active():
            try:
                rest()
            except Exception as e:  # noqa: BLE001 - never into the user's cell
                warn_once("notebook", f"cell boundary not marked ({type(e).__name__}: {e})")

    try:
        shell.events.register("pre_run_cell", before_cell)
    except Exception as e:  # noqa: BLE001
        warn_once("notebook", f"cannot follow cells ({type(e).__name__}: {e})")
        return False
    return True


def show(summary: Mapping[str, Any] | None) -> None:
    """Display the card: HTML in a notebook, the text card on stdout elsewhere."""
    from traceml.report.card import SummaryCard

    if summary is None:
        print("traceml: not running (call traceml.init() first); no summary to show")
        return
    card = SummaryCard(summary)
    if kernel_shell() is not None:
        from IPython.display import display

        display(card)  # type: ignore[no-untyped-call]
        return
    print(str(card), end="")
