"""Shared fixtures: a private runtime dir per test, and a check that no TraceML thread leaks."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


@pytest.fixture(autouse=True)
def runtime_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own runtime dir, so nothing touches the real /tmp/traceml-<uid>."""
    path = tmp_path_factory.mktemp("rt")
    path.chmod(0o700)
    monkeypatch.setenv("TRACEML_RUNTIME_DIR", str(path))
    return path


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    before = {t.ident for t in threading.enumerate()}
    yield
    leaked = [
        t.name
        for t in threading.enumerate()
        if t.ident not in before and t.name.startswith("traceml") and t.is_alive()
    ]
    assert not leaked, f"TraceML threads left running: {leaked}"


@pytest.fixture
def offline_wandb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """W&B in offline mode in this process, writing its runs under the returned `wandb/` folder
    of `tmp_path`. wandb keeps its settings, the run folder among them, in a process-wide
    singleton made at the first `wandb.init`: without a teardown on both sides, the second test
    of a pytest worker writes into the first one's folder (or the working directory)."""
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    wandb.teardown()
    yield tmp_path / "wandb"
    wandb.teardown()


def traceml_cmd(*args: str) -> list[str]:
    """The CLI as a real subprocess, with this interpreter."""
    return [sys.executable, "-m", "traceml", *args]


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env
