"""Fixtures for tests that run a real TraceML session inside the test process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def session_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh in-process TraceML (init may be called again); yields the summary path to use."""
    import traceml
    from traceml import api

    monkeypatch.setattr(api, "_session", None)
    monkeypatch.setattr(api, "_tried", False)
    summary = tmp_path / "summary.json"
    yield summary
    traceml.shutdown()
