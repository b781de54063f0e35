"""The exporters' metric model: samples from a hand-fed RunStore, the step histogram, and the
Grafana dashboard naming only metrics that exist."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import REPO
from traceml.analysis.store import RunStore
from traceml.export.histogram import BUCKETS_S, SEEN_STEPS, StepHistogram
from traceml.export.metrics import ALL, MIB, STEP_DURATION, run_samples
from traceml.records import RankInfo, StepRecord, SystemSample


def step(i: int, rank: int = 0, ms: float = 20.0, rss: float | None = 100.0) -> StepRecord:
    return StepRecord(
        rank, i, 1.7e9 + i, ms, (ms / 2, None, ms / 4, ms / 4, None, None, 0.0), host_rss_mb=rss
    )


def test_samples_carry_labels_units_and_leave_unmeasured_out() -> None:
    store = RunStore()
    store.add_info(RankInfo("r-1", 0, host="node-a", script="train.py"))
    store.add_steps([step(i, rss=100.0 if i == 10 else None) for i in range(30)])
    store.add_system(SystemSample(0, 1.7e9, process_cpu_pct=150.0))
    by_name: dict[tuple[str, tuple[str, ...]], float] = {
        (s.metric.prom_name, s.labels): s.value for s in run_samples(store)
    }
    rank = ("r-1", "train.py", "0", "node-a")
    assert by_name[("traceml_steps", rank)] == 30
    assert by_name[("traceml_step_median_seconds", rank)] == pytest.approx(0.02)
    assert by_name[("traceml_phase_share_ratio", (*rank, "dataloader"))] == pytest.approx(0.5)
    assert ("traceml_phase_share_ratio", (*rank, "between")) not in by_name  # not measured
    assert by_name[("traceml_host_rss_bytes", rank)] == 100.0 * MIB  # newest reading, step 10
    assert by_name[("traceml_process_cpu_ratio", rank)] == 1.5
    names = {name for name, _ in by_name}
    assert "traceml_device_allocated_bytes" not in names
    assert "traceml_gpu_utilization_ratio" not in names
    assert by_name[("traceml_rank_state", (*rank, "live"))] == 1.0
    assert by_name[("traceml_run_ranks", ("r-1", "train.py"))] == 1.0


def test_empty_store_has_no_samples() -> None:
    assert run_samples(RunStore()) == []


def test_histogram_counts_each_step_once() -> None:
    hist = StepHistogram()
    first = [step(i, ms=5.0) for i in range(10)]
    assert len(hist.observe(first)) == 10
    assert hist.observe(first[5:]) == []  # a re-snapshot sends them again
    assert len(hist.observe([step(10, ms=5000.0), step(3, rank=1, ms=0.5)])) == 2
    b = hist.buckets()
    assert b[0].count == 11 and b[0].sum_s == pytest.approx(0.05 + 5.0)
    cumulative = dict(b[0].cumulative())
    assert cumulative["0.005"] == 10 and cumulative["5.0"] == 11 and cumulative["+Inf"] == 11
    assert dict(b[1].cumulative())[str(BUCKETS_S[0])] == 1


def test_dashboard_uses_only_exported_metrics() -> None:
    exported = {f"{m.prom_name}_total" if m.kind == "counter" else m.prom_name for m in ALL}
    exported |= {f"{STEP_DURATION.prom_name}_{s}" for s in ("bucket", "sum", "count")}
    text = json.dumps(json.loads((REPO / "docs" / "grafana-dashboard.json").read_text()))
    used = set(re.findall(r"traceml_[a-z0-9_]+", text))
    assert used and used <= exported, used - exported


def test_histogram_memory_is_bounded_and_never_counts_twice() -> None:
    hist = StepHistogram()
    hist.observe([step(i) for i in range(1, SEEN_STEPS + 100)])
    assert hist.observe([step(i) for i in range(SEEN_STEPS + 100)]) == []
    assert hist.buckets()[0].count == SEEN_STEPS + 99  # step 0, below the floor, never counted


def test_export_modules_load_no_torch_textual_or_exporter_library() -> None:
    """Importing every exporter (the CLI builds its parser from them) loads none of these: each
    library is imported only when its exporter starts."""
    import subprocess
    import sys

    heavy = ("torch", "textual", "prometheus_client", "opentelemetry", "wandb", "mlflow")
    code = (
        "import sys, traceml.cli.export, traceml.export.prometheus, traceml.export.otlp,"
        " traceml.export.live, traceml.export.wandb_tracker, traceml.export.mlflow_tracker,"
        " traceml.export.tensorboard_tracker\n"
        f"print(sorted(m for m in {heavy!r} + ('tensorboard',) if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stderr
