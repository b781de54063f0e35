"""A final_summary.json built from a hand-filled RunStore and validated, for tests of readers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from traceml.analysis.schema import validate_summary
from traceml.analysis.store import RunStore
from traceml.analysis.summary import build_summary
from traceml.records import ExitKind


def valid_summary(
    store: RunStore,
    *,
    run_id: str = "run",
    script: str = "train.py",
    argv: Sequence[str] = (),
    exit_kind: ExitKind = "ok",
    duration_s: float = 5.0,
    torch_version: str | None = "2.13.0",
) -> dict[str, Any]:
    """The summary of `store` as a real run would write it; fails the test if it breaks schema."""
    summary = build_summary(
        store,
        run_id=run_id,
        script=script,
        argv=list(argv),
        started=1_700_000_000.0,
        duration_s=duration_s,
        exit=exit_kind,
        device="cpu",
        torch_version=torch_version,
    )
    validate_summary(summary)
    return summary
