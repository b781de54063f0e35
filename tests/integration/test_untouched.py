"""A traced model, optimizer and loop stay exactly what they would be without TraceML.

Real torch in this process: checkpoints saved from a traced model load with `weights_only=True`
and in a process where TraceML cannot be imported; copies, state dicts, TorchScript, export and
compile see a plain model; every model of a step is forward time; LBFGS closures stay forward and
backward.
"""

from __future__ import annotations

import copy
import importlib
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import traceml  # noqa: E402
from tests.integration._nets import Net, mlp  # noqa: E402
from traceml.analysis.rules_step import LBFGS_ACTION  # noqa: E402
from traceml.analysis.summary import load_summary  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def train(model: Any, steps: int = 6) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        x, y = torch.randn(4, 8, generator=gen), torch.randn(4, 1, generator=gen)
        with traceml.trace_step(model):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()


def no_traceml_inside(obj: Any) -> None:
    assert b"traceml" not in pickle.dumps(obj)


def test_a_whole_model_checkpoint_reloads_with_weights_only(
    session_env: Path, tmp_path: Path
) -> None:
    traceml.init(mode="auto", summary=session_env)
    model = Net()
    train(model)
    no_traceml_inside(model)
    path = tmp_path / "model.pt"
    torch.save(model, path)
    safe = [Net, torch.nn.Sequential, torch.nn.Linear, torch.nn.ReLU]
    with torch.serialization.safe_globals(safe):
        loaded = torch.load(path, weights_only=True)
    x = torch.randn(3, 8)
    assert torch.equal(loaded(x), model(x))


def test_the_checkpoint_loads_where_traceml_cannot_be_imported(
    session_env: Path, tmp_path: Path
) -> None:
    traceml.init(mode="auto", summary=session_env)
    model = Net()
    train(model)
    path = tmp_path / "model.pt"
    torch.save(model, path)
    expected = model(torch.ones(1, 8)).item()
    code = (
        "import sys; sys.modules['traceml'] = None\n"  # any reference to traceml fails to import
        "import torch\n"
        f"m = torch.load({str(path)!r}, weights_only=False)\n"
        "print(repr(m(torch.ones(1, 8)).item()))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) == expected


def test_copies_state_dicts_and_optimizers_hold_nothing_of_traceml(session_env: Path) -> None:
    traceml.init(mode="auto", summary=session_env)
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train(model)
    ema = copy.deepcopy(model)
    for obj in (ema, model.state_dict(), opt, opt.state_dict()):
        no_traceml_inside(obj)
    assert list(model.state_dict()) == list(Net().state_dict())
    fresh = Net()
    fresh.load_state_dict(model.state_dict())
    x = torch.randn(2, 8)
    assert torch.equal(fresh(x), model(x))
    for m in (model, ema):
        assert not (m._forward_hooks or m._forward_pre_hooks or m._backward_hooks)


def test_torchscript_export_and_compile_see_a_plain_model(session_env: Path) -> None:
    importlib.import_module("torch._dynamo")  # imported before TraceML patches, as some libs do
    traceml.init(mode="auto", summary=session_env)
    model = Net()
    train(model)
    x = torch.randn(2, 8)
    expected = model(x)
    assert torch.equal(torch.jit.script(model)(x), expected)
    assert torch.equal(torch.jit.trace(model, (x,))(x), expected)
    exported = torch.export.export(model, (x,))
    assert torch.equal(exported.module()(x), expected)

    traced = compile_counters(model)
    traceml.shutdown()
    assert load_summary(session_env)["step_time"]["forward_pct"] > 0
    assert compile_counters(model) == traced  # the same graphs, breaks and recompiles as bare


def compile_counters(model: Any) -> dict[str, dict[str, int]]:
    """Train a compiled model, evaluate it between steps, train on: what dynamo did."""
    dynamo = importlib.import_module("torch._dynamo")
    dynamo.reset()
    dynamo.utils.counters.clear()
    compiled = torch.compile(model, backend="eager")
    train(compiled, steps=3)
    with torch.no_grad():
        compiled(torch.randn(2, 8))  # an eval forward outside the step
    train(compiled, steps=2)
    loss_of = torch.compile(lambda x: model(x).square().mean(), backend="eager")
    for _ in range(3):  # a compiled function whose root module call dynamo traces
        with traceml.trace_step(model):
            loss_of(torch.randn(2, 8)).backward()
    counters = dynamo.utils.counters
    return {k: dict(counters[k]) for k in ("stats", "graph_break", "recompiles")}


def test_every_model_of_a_gan_step_is_forward(session_env: Path) -> None:
    """trace_step(D) names the discriminator; G's forward is model compute all the same."""
    traceml.init(mode="auto", summary=session_env)
    torch.manual_seed(0)
    g, d = mlp(64, 512, 64), mlp(64, 512, 1)
    opt_g = torch.optim.Adam(g.parameters(), lr=1e-4)
    opt_d = torch.optim.Adam(d.parameters(), lr=1e-4)
    bce = torch.nn.BCEWithLogitsLoss()
    for _ in range(40):
        real, noise = torch.randn(64, 64), torch.randn(64, 64)
        with traceml.trace_step(d):
            fake = g(noise)
            opt_d.zero_grad()
            loss_d = bce(d(real), torch.ones(64, 1)) + bce(d(fake.detach()), torch.zeros(64, 1))
            loss_d.backward()
            opt_d.step()
            opt_g.zero_grad()
            bce(d(fake), torch.ones(64, 1)).backward()
            opt_g.step()
    traceml.shutdown()
    summary = load_summary(session_env)
    st = summary["step_time"]
    assert st["forward_pct"] > st["other_pct"] + st["between_pct"], st
    assert summary["primary"]["kind"] != "HOST_BOUND", summary["primary"]
    assert summary["run"]["optimizers"] == ["Adam"]


def test_an_lbfgs_closure_keeps_forward_and_backward(session_env: Path) -> None:
    traceml.init(mode="auto", summary=session_env)
    torch.manual_seed(0)
    model = mlp(64, 512, 1)
    opt = torch.optim.LBFGS(model.parameters(), max_iter=4, history_size=4)
    x, y = torch.randn(128, 64), torch.randn(128, 1)
    for _ in range(25):

        def closure() -> Any:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            return loss

        with traceml.trace_step(model):
            opt.step(closure)
    traceml.shutdown()
    summary = load_summary(session_env)
    st = summary["step_time"]
    assert st["forward_pct"] > 0 and st["backward_pct"] > 0, st
    assert summary["run"]["optimizers"] == ["LBFGS"]
    for finding in summary["findings"]:  # LBFGS's own math may well be the bottleneck
        assert "fused" not in finding["action"], finding
        if finding["kind"] == "OPTIMIZER_BOUND":
            assert finding["action"] == LBFGS_ACTION
            assert "optimizer (LBFGS)" in finding["summary"]


def test_traceml_skip_leaves_a_patch_out(
    session_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRACEML_SKIP", "forward,optimizer")
    call = torch.nn.Module.__dict__["__call__"]
    traceml.init(mode="auto", summary=session_env)
    assert torch.nn.Module.__dict__["__call__"] is call
    train(Net())
    traceml.shutdown()
    st = load_summary(session_env)["step_time"]
    assert st["forward_pct"] is None and st["optimizer_pct"] is None
    assert st["backward_pct"] is not None


BROKEN = """
import torch, traceml
traceml.init()
model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(5, 1))
for batch in torch.utils.data.DataLoader(torch.randn(16, 8), batch_size=4):
    with traceml.trace_step(model):
        model(batch)
"""


def test_a_plain_scripts_traceback_has_no_traceml_frames(tmp_path: Path) -> None:
    """`python train.py` with traceml.init(): the same traceback as with TraceML off."""
    script = tmp_path / "broken.py"
    script.write_text(BROKEN)
    runs = {}
    for mode in ("off", "auto"):
        env = {**os.environ, "TRACEML_MODE": mode, "TRACEML_SUMMARY": str(tmp_path / "s.json")}
        runs[mode] = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60
        )
    assert runs["auto"].returncode == runs["off"].returncode == 1
    assert "mat1 and mat2 shapes cannot be multiplied" in runs["off"].stderr
    traced = runs["auto"].stderr
    assert traced.startswith(runs["off"].stderr), traced  # then only TraceML's card follows
    assert "traceml/instrument" not in traced
