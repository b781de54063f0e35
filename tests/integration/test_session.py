"""A real session in this process: hooks measure the right phases and nothing leaks at shutdown."""

from __future__ import annotations

import importlib
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import traceml  # noqa: E402
from traceml import api, probe  # noqa: E402
from traceml.analysis.schema import validate_summary  # noqa: E402
from traceml.analysis.summary import load_summary  # noqa: E402


def torch_state() -> dict[str, Any]:
    opt = importlib.import_module("torch.optim.optimizer")
    dl = importlib.import_module("torch.utils.data.dataloader")
    return {
        "call": torch.nn.Module.__dict__["__call__"],
        "call code": torch.nn.Module.__dict__["__call__"].__code__,
        "module globals": sorted(n for n in vars(torch.nn.modules.module) if "traceml" in n),
        "next": dl._BaseDataLoaderIter.__dict__["__next__"],
        "autograd": torch.autograd.backward,
        "to": "to" in torch.Tensor.__dict__,
        "cuda": "cuda" in torch.Tensor.__dict__,
        "pre": len(opt._global_optimizer_pre_hooks),
        "post": len(opt._global_optimizer_post_hooks),
        "excepthook": sys.excepthook,
        "sigterm": signal.getsignal(signal.SIGTERM),
    }


def loop(model: Any, steps: int, sleep_between: float = 0.0) -> None:
    from torch.utils.data import DataLoader, TensorDataset

    data = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    done = 0
    while done < steps:
        for x, y in data:
            with traceml.trace_step(model):
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
            time.sleep(sleep_between)
            done += 1
            if done == steps:
                return


C_TIMER = pytest.mark.parametrize("c_timer", [True, False], ids=["c", "python"])
"""Runs a test with the C timer and wrappers, then with the pure-Python ones (TRACEML_C_TIMER=0)."""


def use_timer(monkeypatch: pytest.MonkeyPatch, c_timer: bool) -> None:
    monkeypatch.setenv("TRACEML_C_TIMER", "1" if c_timer else "0")


def assert_timer(session: Any, c_timer: bool) -> None:
    module = type(session.timer).__module__
    assert module == ("traceml.instrument._native" if c_timer else "traceml.instrument.timer")


@C_TIMER
def test_no_hook_or_patch_leaks(
    session_env: Path, monkeypatch: pytest.MonkeyPatch, c_timer: bool
) -> None:
    use_timer(monkeypatch, c_timer)
    before = torch_state()
    model = torch.nn.Linear(8, 1)
    traceml.init(mode="auto", summary=session_env)
    session = api.current_session()
    assert session is not None
    assert_timer(session, c_timer)
    loop(model, 5)
    assert session.hooks.installed > 0
    assert torch_state() != before
    assert not model._forward_pre_hooks and not model._forward_hooks  # nothing inside the model
    path = traceml.shutdown()
    assert path == session_env
    assert session.hooks.installed == 0
    assert torch_state() == before
    validate_summary(load_summary(path))


@C_TIMER
def test_phases_are_measured_where_they_happen(
    session_env: Path, monkeypatch: pytest.MonkeyPatch, c_timer: bool
) -> None:
    use_timer(monkeypatch, c_timer)
    model = torch.nn.Linear(8, 1)
    traceml.init(mode="auto", summary=session_env)
    assert_timer(api.current_session(), c_timer)
    loop(model, 30, sleep_between=0.004)
    traceml.shutdown()
    summary = load_summary(session_env)
    st = summary["step_time"]
    assert st["steps"] > 0
    assert st["between_pct"] > 50  # the 4 ms sleep dwarfs the tiny model's work
    for phase in ("dataloader", "forward", "backward", "optimizer"):
        assert st[f"{phase}_pct"] is not None and st[f"{phase}_pct"] > 0
    assert st["h2d_pct"] is None


def test_the_step_context_holds_its_methods_bound(
    session_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the C timer, a `with` on trace_step's context finds __enter__ and __exit__ already
    bound (the same objects at every lookup: no method object made per step), and the context
    still times each step and lets the user's exception through."""
    use_timer(monkeypatch, True)
    traceml.init(mode="manual", summary=session_env)
    ctx = traceml.trace_step(None)
    assert ctx.__enter__ is ctx.__enter__ and ctx.__exit__ is ctx.__exit__
    for _ in range(3):
        with traceml.trace_step(None):
            pass
    with pytest.raises(ZeroDivisionError), traceml.trace_step(None):
        1 / 0  # noqa: B018
    traceml.shutdown()
    assert load_summary(session_env)["step_time"]["steps"] == 4


def test_manual_mode_only_times_marked_phases(session_env: Path) -> None:
    model = torch.nn.Linear(8, 1)
    traceml.init(mode="manual", summary=session_env)
    for _ in range(10):
        with traceml.trace_step(model):
            with traceml.phase("forward"):
                out = model(torch.randn(4, 8))
            out.sum().backward()
    traceml.shutdown()
    st = load_summary(session_env)["step_time"]
    assert st["forward_pct"] is not None and st["forward_pct"] > 0
    assert st["backward_pct"] is None  # not marked, not hooked: not measured
    assert st["dataloader_pct"] is None


@C_TIMER
def test_misuse_never_breaks_the_loop(
    session_env: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    c_timer: bool,
) -> None:
    use_timer(monkeypatch, c_timer)
    monkeypatch.setattr(probe, "_warned", set())  # each run warns afresh (once per process)
    traceml.init(mode="auto", summary=session_env)
    traceml.init(mode="auto", summary=session_env)
    with traceml.trace_step("not a module"):
        x = 1 + 1
    with traceml.trace_step(None), traceml.trace_step(None):
        x += 1
    assert x == 3
    with pytest.raises(traceml.errors.ConfigError, match="unknown phase"):
        traceml.phase("loss")
    text = caplog.text
    assert "already called" in text
    assert "expects the torch.nn.Module" in text
    assert "nested" in text


def test_mode_off_is_a_no_op(session_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEML_MODE", "off")
    before = torch_state()
    traceml.init(mode="auto", summary=session_env)
    assert api.current_session() is None
    with traceml.trace_step(torch.nn.Linear(2, 2)):
        pass
    assert torch_state() == before
    assert not session_env.exists()


def test_hooked_model_can_be_saved_and_copied(session_env: Path) -> None:
    import copy
    import io

    model = torch.nn.Linear(8, 1)
    traceml.init(mode="auto", summary=session_env)
    loop(model, 3)
    buf = io.BytesIO()
    torch.save(model, buf)  # whole-model checkpoints must keep working under TraceML
    buf.seek(0)
    restored = torch.load(buf, weights_only=False)
    ema = copy.deepcopy(model)
    session = api.current_session()
    assert session is not None
    timer: Any = session.timer  # either timer keeps the step's time so far in `_acc`
    before = timer.seen
    timer_acc = list(timer._acc)
    restored(torch.randn(2, 8))
    ema(torch.randn(2, 8))
    assert timer._acc == timer_acc, "a copy of the model is not timed as the model"
    assert timer.seen == before


@C_TIMER
@pytest.mark.parametrize("inline", ["1", None], ids=["inline", "default"])
def test_traceml_inline_runs_the_beats_on_the_training_thread(
    session_env: Path, monkeypatch: pytest.MonkeyPatch, c_timer: bool, inline: str | None
) -> None:
    """TRACEML_INLINE=1: a real session's step timer runs the due beats at its steps' ends (the
    tx thread only while none came); by default every beat is the tx thread's. Either way every
    step reaches the summary."""
    use_timer(monkeypatch, c_timer)
    if inline is None:
        monkeypatch.delenv("TRACEML_INLINE", raising=False)
    else:
        monkeypatch.setenv("TRACEML_INLINE", inline)
    traceml.init(mode="auto", summary=session_env)
    session = api.current_session()
    assert session is not None and session.worker is not None
    beats: list[bool] = []
    real = session.worker._beat

    def noted(now: float) -> None:
        beats.append(threading.current_thread() is threading.main_thread())
        real(now)

    session.worker._beat = noted  # type: ignore[method-assign]
    model = torch.nn.Linear(8, 1)
    deadline = time.monotonic() + 60.0
    steps = 0
    while (len(beats) < 4 or steps < 200) and time.monotonic() < deadline:
        loop(model, 20, sleep_between=0.002)
        steps += 20
    traceml.shutdown()
    on_training = sum(beats)
    if inline:
        assert on_training >= 3 and on_training >= len(beats) - 2  # a starved step: the tx thread
    else:
        assert on_training == 0 and len(beats) >= 4
    assert load_summary(session_env)["step_time"]["steps"] == steps
