"""final_summary.json: shape, nulls, size, trend, atomic writes and one-line load errors."""

from __future__ import annotations

import errno
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from traceml.analysis import summary as summary_mod
from traceml.analysis.schema import SUMMARY_SCHEMA, load_schema, validate_summary
from traceml.analysis.store import RunStore
from traceml.analysis.summary import build_summary, load_summary, step_trend, write_summary
from traceml.errors import ConfigError, SchemaError
from traceml.records import RankEnd, RankInfo, StepRecord, SystemSample

CPU_PHASES = (20.0, 2.0, 30.0, 40.0, 5.0, None, 3.0)


def cpu_store(steps: int = 200, step_ms: float = 100.0, rss: float = 800.0) -> RunStore:
    store = RunStore()
    store.add_info(RankInfo("run-1", 0, host="box", script="train.py"))
    store.add_steps(
        [StepRecord(0, s, 0.0, step_ms, CPU_PHASES, host_rss_mb=rss) for s in range(steps)]
    )
    store.add_system(SystemSample(0, 1.0, process_cpu_pct=90.0, host_cpu_pct=30.0))
    store.add_end(RankEnd(0, "ok", steps, 10.0))
    return store


def gpu_store(ranks: int = 4, steps: int = 100, slow: int = 3) -> RunStore:
    store = RunStore()
    for r in range(ranks):
        store.add_info(
            RankInfo(
                "run-2",
                r,
                world_size=ranks,
                host=f"n{r // 2}",
                device=f"cuda:{r % 2}",
                device_capacity_mb=80_000.0,
            )
        )
        extra = 30.0 if r == slow else 0.0
        phases = (5.0 + extra, 1.0, 20.0, 60.0 - extra + 30.0, 8.0, 2.0, 4.0)
        store.add_steps(
            [
                StepRecord(
                    r, s, 0.0, sum(phases), phases, "cuda", 2000.0, 30_000.0, 40_000.0, 35_000.0
                )
                for s in range(steps)
            ]
        )
        store.add_system(SystemSample(r, 1.0, process_cpu_pct=100.0, gpu_util_pct=50.0 + r))
    return store


def build(store: RunStore, **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "run_id": "run-1",
        "script": "train.py",
        "argv": ["--lr", "0.1"],
        "started": 1_700_000_000.0,
        "duration_s": 12.5,
        "exit": "ok",
        "device": "cpu",
        "torch_version": "2.13.0",
    }
    summary = build_summary(store, **{**args, **kw})
    validate_summary(summary)
    return summary


def test_cpu_summary_shape_and_nulls() -> None:
    s = build(cpu_store())
    assert list(s) == [
        "schema",
        "run",
        "primary",
        "step_time",
        "step_memory",
        "ranks",
        "system",
        "findings",
        "timeline",
    ]
    assert s["schema"] == SUMMARY_SCHEMA
    assert s["run"]["started"] == "2023-11-14T22:13:20+00:00"
    assert s["run"]["argv"] == ["--lr", "0.1"]
    assert s["primary"]["kind"] == "INPUT_BOUND"
    step = s["step_time"]
    assert (step["steps"], step["median_ms"], step["dataloader_pct"]) == (200, 100.0, 20.0)
    assert step["h2d_pct"] is None
    assert step["trend"] == "stable"
    memory = s["step_memory"]
    assert memory["device_peak_allocated_mb"] is None
    assert memory["device_capacity_mb"] is None
    assert memory["host_rss_peak_mb"] == 800.0
    assert memory["growth_mb_per_1k_steps"] == 0.0
    assert s["system"]["cpu_pct_avg"] == 90.0
    assert s["system"]["gpu_util_pct_avg"] is None
    assert s["ranks"][0]["lag_pct"] is None
    assert (s["ranks"][0]["state"], s["ranks"][0]["exit"]) == ("finished", "ok")


def test_gpu_multi_rank_summary() -> None:
    s = build(gpu_store(), device="cuda:0", run_id="run-2")
    assert (s["run"]["world_size"], s["run"]["hosts"]) == (4, 2)
    assert s["step_memory"]["device_peak_allocated_mb"] == 35_000.0
    assert s["step_memory"]["device_capacity_mb"] == 80_000.0
    assert s["step_time"]["h2d_pct"] is not None
    lags = [r["lag_pct"] for r in s["ranks"]]
    assert lags[3] == 23.1
    assert lags[0] == 0.0
    assert "INPUT_STRAGGLER" in [f["kind"] for f in s["findings"]]
    assert s["system"]["gpu_util_pct_avg"] == 51.5
    assert s["ranks"][0]["state"] == "live"
    assert s["ranks"][0]["exit"] is None


def test_empty_run_says_wrap_the_step() -> None:
    s = build(RunStore(), exit="error", torch_version=None, started=0.0)
    assert s["primary"]["kind"] == "NO_STEPS"
    assert "traceml.trace_step(model)" in s["primary"]["action"]
    assert s["step_time"]["median_ms"] is None
    assert s["run"]["torch"] is None
    assert s["run"]["started"] is None
    assert s["ranks"] == []
    assert s["system"]["samples"] == 0


def test_three_step_run_still_has_numbers() -> None:
    s = build(cpu_store(steps=3))
    assert s["step_time"]["median_ms"] == 100.0
    assert s["step_time"]["dataloader_pct"] == 20.0


@pytest.mark.parametrize("steps", [100, 30_000])
def test_summary_stays_small(steps: int, tmp_path: Path) -> None:
    summary = build(cpu_store(steps=steps))
    assert len(json.dumps(summary)) < 10_000
    assert len(summary["timeline"]["steps"]) <= 64
    assert sum(summary["timeline"]["steps"]) == steps
    path = write_summary(summary, tmp_path / "s.json")
    assert path.stat().st_size < 12_000  # the timeline's columns are one line each
    assert load_summary(path) == summary


@pytest.mark.parametrize(
    ("slope", "steps", "expected"),
    [
        (0.0, 200, "stable"),
        (0.03, 200, "stable"),
        (0.1, 200, "slowing"),
        (-0.1, 200, "speeding_up"),
        (0.5, 15, "stable"),
    ],
)
def test_trend(slope: float, steps: int, expected: str) -> None:
    store = RunStore()
    store.add_steps(
        [StepRecord(0, s, 0.0, 100.0 + slope * s + (s % 3), CPU_PHASES) for s in range(steps)]
    )
    assert step_trend(store.summary_view()) == expected


def test_ranks_list_is_capped_keeping_the_laggards(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(summary_mod, "MAX_RANKS", 3)
    s = build(gpu_store(ranks=6, slow=4), device="cuda:0")
    assert [r["rank"] for r in s["ranks"]][-1] == 4
    assert len(s["ranks"]) == 3
    assert s["run"]["ranks_omitted"] == 3


def test_write_creates_folders_and_round_trips(tmp_path: Path) -> None:
    s = build(cpu_store())
    target = tmp_path / "a" / "b" / "final_summary.json"
    assert write_summary(s, target) == target
    assert load_summary(target) == s
    s["run"]["id"] = "second"
    write_summary(s, target)
    assert load_summary(target)["run"]["id"] == "second"
    assert os.listdir(target.parent) == ["final_summary.json"]


def test_write_into_a_file_path_is_a_config_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match=r"cannot write the summary to .*file/s\.json") as info:
        write_summary(build(cpu_store()), blocker / "s.json")
    assert "\n" not in str(info.value)


def test_full_disk_leaves_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "final_summary.json"
    target.write_text("old")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(ConfigError, match="the disk is full"):
        write_summary(build(cpu_store()), target)
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["final_summary.json"]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "final_summary.json"
    path.write_text(text)
    return path


def valid(**changes: Any) -> dict[str, Any]:
    s = build(cpu_store(steps=30))
    s.update(changes)
    return s


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "is not JSON (line 1, column 2)"),
        ("[1, 2]", "is not a TraceML summary"),
        ('{"hello": 1}', "is not a TraceML summary"),
        (json.dumps(valid(schema="traceml.summary/2")), "is a traceml.summary/2 summary; this"),
        (json.dumps(valid(step_time=None)), "section 'step_time' is missing"),
        (json.dumps({**valid(), "ranks": {}}), "section 'ranks' is missing or not a list"),
        (json.dumps({**valid(), "extra": 1}), "at top level"),
    ],
)
def test_load_rejects_bad_files_in_one_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(SchemaError) as info:
        load_summary(write(tmp_path, text))
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert str(tmp_path) in str(info.value)


def test_load_names_both_versions(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match=r"traceml.summary/9.*reads traceml.summary/1"):
        load_summary(write(tmp_path, json.dumps(valid(schema="traceml.summary/9"))))


def test_load_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match=r"no summary at .*nope\.json"):
        load_summary(tmp_path / "nope.json")


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("step_time", "median_ms"), "fast"),
        (("step_time", "trend"), "sideways"),
        (("run", "world_size"), 0),
        (("primary", "severity"), "fatal"),
        (("ranks", 0, "state"), "sleeping"),
        (("step_memory", "host_rss_peak_mb"), -1.0),
    ],
)
def test_schema_rejects_wrong_types(path: tuple[Any, ...], value: Any) -> None:
    s = valid()
    node: Any = s
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(SchemaError, match=".".join(str(p) for p in path)):
        validate_summary(s)


def test_schema_rejects_missing_key() -> None:
    s = valid()
    del s["step_time"]["trend"]
    with pytest.raises(SchemaError, match="'trend' is a required property"):
        validate_summary(s)


def test_without_jsonschema_sections_are_still_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "jsonschema", None)
    s = valid()
    s["step_time"]["median_ms"] = "fast"
    validate_summary(s)
    with pytest.raises(SchemaError, match="section 'findings'"):
        validate_summary({**s, "findings": None})


def test_shipped_schema_is_draft_2020_12() -> None:
    schema = load_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert SUMMARY_SCHEMA in schema["properties"]["schema"]["enum"]


def test_a_version_1_summary_still_loads(tmp_path: Path) -> None:
    old = valid()
    old["schema"] = "traceml.summary/1"
    del old["timeline"]
    for key in ("phases_over", "spike_steps", "max_ms", "slowest"):
        del old["step_time"][key]
    del old["run"]["error"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    assert load_summary(path)["schema"] == "traceml.summary/1"


def test_a_restarted_job_says_which_incarnation_it_describes() -> None:
    from traceml.analysis.render import render_card

    store = cpu_store()
    assert build(store)["run"]["restarts"] == 0
    store.add_info(RankInfo("run-1", 0, host="box", script="train.py", incarnation=2))
    summary = build(store)
    assert summary["run"]["restarts"] == 2
    assert "after 2 restarts" in render_card(summary)
