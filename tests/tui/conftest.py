"""Viewer tests: run `async def` tests on a fresh event loop (no asyncio plugin is needed)."""

from __future__ import annotations

import asyncio
import inspect
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run a coroutine test function with asyncio.run; leave plain tests to pytest."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    asyncio.run(pyfuncitem.obj(**{name: pyfuncitem.funcargs[name] for name in names}))
    return True


@pytest.fixture(autouse=True)
def panels_every_snapshot(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The panels draw every snapshot, as they did before their PANELS_S cadence: these tests
    check what a snapshot shows, not when. Tests of the cadence itself are marked `cadence`."""
    if request.node.get_closest_marker("cadence") is None:
        monkeypatch.setattr("traceml_tui.screens.main.PANELS_S", 0.0)
