"""TraceML in a real Jupyter kernel (ipykernel, driven by nbclient), across cells.

One notebook trains in several cells with a pause between two of them, lists and attaches to its
own run from other processes while a cell trains, reads `traceml.summary()` live, displays the
card, and leaves its final_summary.json when the kernel shuts down.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.slow

RUN_ID = "notebook-test-run"
PAUSE_S = 1.5
"""Idle time between two training cells; no step may count it."""

SETUP = """
import json, subprocess, sys, time
import torch, traceml
traceml.init(run_id={run_id!r}, summary={summary!r})
model = torch.nn.Linear(16, 16)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
done = 0
def steps(n):
    global done
    for _ in range(n):
        with traceml.trace_step(model):
            opt.zero_grad()
            model(torch.randn(8, 16)).sum().backward()
            opt.step()
        done += 1
"""
VIEWER = """
import sys, time
from traceml.errors import RunNotFoundError
from traceml.transport.subscribe.runs import resolve_run
from traceml.transport.subscribe.subscriber import Subscriber
from traceml.transport.wire.events import StepsEvent
deadline = time.monotonic() + 60
while True:
    try:
        run = resolve_run(sys.argv[1])
        if run.ranks:
            break
    except RunNotFoundError:
        pass
    if time.monotonic() > deadline:
        sys.exit("run never appeared")
    time.sleep(0.05)
with Subscriber(run) as sub:
    while time.monotonic() < deadline:
        steps = [e for e in sub.poll(100) if isinstance(e, StepsEvent)]
        if steps:
            print("attached", max(r.step for e in steps for r in e.records), flush=True)
            sys.exit(0)
sys.exit("no step seen")
"""
WHILE_TRAINING = """
ls = subprocess.Popen([sys.executable, "-m", "traceml", "ls", "--json"],
                      stdout=subprocess.PIPE, text=True)
viewer = subprocess.Popen([sys.executable, "-c", {viewer!r}, {run_id!r}],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
deadline = time.monotonic() + 90
while (ls.poll() is None or viewer.poll() is None) and time.monotonic() < deadline:
    steps(5)
print(json.dumps({{"ls": ls.communicate()[0], "viewer": viewer.communicate()[0]}}))
"""
LIVE = """
live = traceml.summary()  # right after the last step: summary() has the tx thread fold it now
print(json.dumps({"summary": live, "done": done}))
traceml.show()
"""


def _notebook(summary: Path) -> Any:
    # The pause comes after the warm-up (5 % of the steps), so the summary would count it.
    cells = [
        SETUP.format(run_id=RUN_ID, summary=str(summary)),
        WHILE_TRAINING.format(viewer=VIEWER, run_id=RUN_ID),
        "steps(50)",
        f"time.sleep({PAUSE_S})",
        "steps(30)",
        LIVE,
    ]
    new_cell: Any = nbformat.v4.new_code_cell
    new_notebook: Any = nbformat.v4.new_notebook
    return new_notebook(cells=[new_cell(c) for c in cells])


def _stdout(cell: Any) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.get("name") == "stdout")


def _html(cell: Any) -> str:
    return "".join(o.get("data", {}).get("text/html", "") for o in cell.outputs)


def test_notebook_trains_across_cells(tmp_path: Path) -> None:
    summary_path = tmp_path / "final_summary.json"
    nb = _notebook(summary_path)
    client = NotebookClient(
        nb,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()  # raises CellExecutionError, with the traceback, if any cell failed

    seen = json.loads(_stdout(nb.cells[1]))
    runs = {r["id"]: r for r in json.loads(seen["ls"])}
    assert RUN_ID in runs, seen["ls"]
    assert runs[RUN_ID]["state"] == "live"
    assert seen["viewer"].startswith("attached"), seen["viewer"]

    live = json.loads(_stdout(nb.cells[5]))
    summary, done = live["summary"], live["done"]
    assert summary["run"]["exit"] == "running"
    assert summary["step_time"]["steps"] == done
    # The 1.5 s between two cells is in no step: every step here takes well under a second.
    assert summary["step_time"]["max_ms"] < PAUSE_S * 1000 / 2, summary["step_time"]
    assert 'class="traceml-card"' in _html(nb.cells[5])
    assert summary["primary"]["kind"] in _html(nb.cells[5])

    written = json.loads(summary_path.read_text())  # at the kernel's shutdown
    assert written["run"]["exit"] == "ok"
    assert written["step_time"]["steps"] == done
    assert written["run"]["id"] == RUN_ID
