"""`import traceml` and the headless modules stay light: no torch, no Textual, no zmq at import."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("torch", "textual", "zmq", "traceml_tui")


def loaded_after(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nprint(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_import_traceml_loads_nothing_heavy() -> None:
    mods = loaded_after("import traceml")
    assert not {m for m in mods if m.split(".")[0] in HEAVY}


def test_api_attribute_access_stays_light_until_init() -> None:
    mods = loaded_after("import traceml\ntraceml.trace_step\ntraceml.phase")
    assert "torch" not in mods
    assert "textual" not in mods


@pytest.mark.parametrize(
    "module",
    [
        "traceml.records",
        "traceml.config",
        "traceml.analysis.store",
        "traceml.analysis.summary",
        "traceml.analysis.diagnose",
        "traceml.transport.subscribe.subscriber",
        "traceml.transport.subscribe.runs",
        "traceml.cli.main",
        "traceml.integrations",
        "traceml.analysis.compare",
    ],
)
def test_headless_modules_never_load_torch_or_textual(module: str) -> None:
    mods = loaded_after(f"import {module}")
    for heavy in ("torch", "textual", "mlflow", "wandb"):
        assert heavy not in mods, f"{module} imports {heavy}"


def test_the_job_collector_process_never_loads_torch() -> None:
    """It runs beside a training rank: torch would cost it seconds and hundreds of MB."""
    mods = loaded_after(
        "import traceml.collect.collectord, traceml.collect.jobcollector\n"
        "import traceml.collect.finish, traceml.analysis.summary, traceml.analysis.render"
    )
    assert "torch" not in mods and "textual" not in mods
