"""A stalled rank says where it is stuck: the heartbeat and the rank file carry its open phase.

A real training script under `traceml run --no-live` hangs inside its model's forward; `traceml
ls` and a real subscriber (folding into a RunStore, as the live view does) both name `forward`.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import traceml_cmd
from tests.integration._transport_helpers import wait_for
from traceml.analysis.store import RunStore
from traceml.transport.subscribe.fold import apply_events
from traceml.transport.subscribe.runs import resolve_run
from traceml.transport.subscribe.subscriber import Subscriber

pytestmark = pytest.mark.slow

SCRIPT = """
import sys, time
from pathlib import Path
import torch, traceml

class Stuck(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 1)
        self.calls = 0
    def forward(self, x):
        self.calls += 1
        if self.calls == 40:  # a collective that never returns, a deadlocked data source...
            print("stuck", flush=True)
            while not Path(sys.argv[1]).exists():
                time.sleep(0.05)
        return self.lin(x)

model = Stuck()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(60):
    with traceml.trace_step(model):
        opt.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
"""


@pytest.mark.parametrize("beats", ["thread", "process"])
def test_a_stalled_rank_names_the_phase_it_is_stuck_in(
    tmp_path: Path, runtime_dir: Path, beats: str
) -> None:
    """With the beats in a process of their own (TRACEML_BEATS=process) the phase comes from the
    step ring's header, the records and heartbeats from that process's publisher."""
    script, release = tmp_path / "stuck.py", tmp_path / "release"
    script.write_text(SCRIPT)
    cmd = traceml_cmd("run", "--no-live", "--run-id", "stuck-1", str(script), str(release))
    env = dict(os.environ, TRACEML_BEATS=beats)
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "stuck\n"
        store = RunStore()
        with Subscriber(resolve_run("stuck-1", runtime_dir)) as sub:
            view = store.live_view()

            def says_forward() -> bool:
                nonlocal view
                apply_events(store, sub.poll(50))
                view = store.live_view()
                return bool(view.ranks) and view.ranks[0].phase == "forward"

            wait_for(says_forward, timeout=15, what="a heartbeat naming forward")

        def ls_says_stalled_in_forward() -> bool:
            out = subprocess.run(
                traceml_cmd("ls"), capture_output=True, text=True, timeout=30
            ).stdout
            return "stalled (no step for" in out and "in forward)" in out

        wait_for(ls_says_stalled_in_forward, timeout=30, what="ls: stalled ... in forward")
    finally:
        release.touch()
        try:
            proc.wait(timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
