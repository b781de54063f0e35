"""The HTML report, comparison page and notebook card, from summaries built by a real RunStore."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import pytest

from tests.summaries import valid_summary
from traceml.analysis.compare import compare
from traceml.analysis.store import RunStore
from traceml.records import PHASES, RankInfo, StepRecord
from traceml.report import charts
from traceml.report.card import SummaryCard, card_html, scoped_css
from traceml.report.compare import render_compare_report
from traceml.report.run import NO_TIMELINE, render_report

VOID = {"meta", "br", "img", "input", "link", "hr", "col", "area", "base", "source", "wbr"}


class Checker(HTMLParser):
    """Fails on a closing tag that does not match the open one; collects ids and link targets."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.ids: list[str] = []
        self.urls: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.append(str(values["id"]))
        self.urls += [str(values[k]) for k in ("src", "href") if values.get(k)]
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
        else:
            self.stack.pop()


def parse(text: str) -> Checker:
    checker = Checker()
    checker.feed(text)
    checker.close()
    assert not checker.errors, checker.errors[:5]
    assert not checker.stack, f"unclosed: {checker.stack}"
    return checker


def store_of(ranks: int = 1, steps: int = 60, slow_rank: int | None = None) -> RunStore:
    store = RunStore()
    for r in range(ranks):
        store.add_info(
            RankInfo(
                run_id="r", rank=r, local_rank=r, world_size=ranks, host=f"host{r}", pid=1,
                started=0.0, script="train.py", argv=(), device="cpu", device_capacity_mb=None,
                torch_version="2", traceml_version="0", incarnation=0,
            )
        )  # fmt: skip
    records = []
    for s in range(steps):
        for r in range(ranks):
            data = 6.0 if r == slow_rank else 1.0
            phases = (data, 0.5, 4.0, 6.0, 1.0, None, 0.5)
            records.append(
                StepRecord(
                    rank=r, step=s, wall_start=s * 0.02, step_ms=sum(p or 0 for p in phases),
                    phases=phases, host_rss_mb=500.0 + s,
                )
            )  # fmt: skip
    store.add_steps(records)
    return store


def columns(n: int) -> dict[str, Any]:
    """A timeline as final_summary.json keeps it: columns, device memory not measured."""
    return {
        "rank": 0,
        "first_step": [i * 10 for i in range(n)],
        "last_step": [i * 10 + 9 for i in range(n)],
        "steps": [10] * n,
        "mean_ms": [13.0] * n,
        "p50_ms": [12.5] * n,
        "p95_ms": [15.0] * n,
        "max_ms": [20.0] * n,
        "phase_ms": {p: (None if p == "h2d" else [2.0] * n) for p in PHASES},
        "host_rss_mb": [500.0 + i for i in range(n)],
        "device_allocated_mb": None,
    }


@pytest.fixture(scope="module")
def two_ranks() -> dict[str, Any]:
    return valid_summary(store_of(ranks=2, slow_rank=1))


def test_report_is_one_valid_page_with_its_charts(two_ranks: dict[str, Any]) -> None:
    summary = {**two_ranks, "timeline": columns(40)}
    text = render_report(summary, source="x/final_summary.json")
    checker = parse(text)
    assert text.startswith("<!DOCTYPE html>")
    for chart in ("phase-split", "step-time-over-run", "memory-over-run", "rank-phases"):
        assert chart in checker.ids
    assert text.count("Plotly.newPlot(") == 4
    assert checker.urls == []  # nothing to fetch: plotly.js is inline
    assert len(re.findall(r"<script[^>]*\bsrc=", text)) == 0
    assert summary["primary"]["kind"] in text and summary["primary"]["action"][:30] in text


def test_verdict_action_phases_and_ranks_are_in_the_page(two_ranks: dict[str, Any]) -> None:
    text = render_report(two_ranks)
    body = text[text.index("<body>") :]
    assert body.index(two_ranks["primary"]["kind"]) < body.index("Step time")
    assert "Next:" in body
    assert 'h2d</td><td class="l"><span class="muted">not measured' in body
    assert body.count("<tr>") >= len(PHASES) + 2
    assert '<td class="l">host1</td>' in body


def test_without_a_timeline_the_page_says_so(two_ranks: dict[str, Any]) -> None:
    summary = {k: v for k, v in two_ranks.items() if k != "timeline"}
    text = render_report(summary)
    assert NO_TIMELINE in text.replace("&#x27;", "'")
    assert "step-time-over-run" not in text


def test_summary_text_is_escaped(two_ranks: dict[str, Any]) -> None:
    run = {**two_ranks["run"], "script": "<script>alert(1)</script>.py"}
    text = render_report({**two_ranks, "run": run})
    assert "<script>alert(1)" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;.py" in text


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, []),
        ({"rank": 0, "first_step": []}, []),
        ([{"first_step": 10, "last_step": 19}, {"first_step": 0, "last_step": 9}], [0, 10]),
    ],
)
def test_timeline_shapes(raw: Any, expected: list[int]) -> None:
    assert [w["first_step"] for w in charts.timeline({"timeline": raw})] == expected


def test_timeline_columns_become_windows_and_nulls_stay_gaps() -> None:
    windows = charts.timeline({"timeline": columns(3)})
    assert [w["last_step"] for w in windows] == [9, 19, 29]
    assert windows[1]["phase_ms"]["h2d"] is None
    assert windows[2]["device_allocated_mb"] is None
    memory = charts.memory_over_run(windows)
    assert memory is not None
    assert [t.name for t in memory.data] == ["host RSS"]  # device memory: not measured, no line
    step = charts.step_time_over_run(windows)
    assert step is not None
    assert "h2d" not in [t.name for t in step.data]


def test_report_size_does_not_grow_with_the_timeline(two_ranks: dict[str, Any]) -> None:
    small = len(render_report({**two_ranks, "timeline": columns(2)}))
    full = len(render_report({**two_ranks, "timeline": columns(128)}))
    assert full - small < 60_000  # 128 windows at most, whatever the number of steps
    assert small > len(charts.plotly_js())


def test_compare_page(two_ranks: dict[str, Any]) -> None:
    base = valid_summary(store_of(ranks=2))
    base["timeline"], cand = columns(10), {**two_ranks, "timeline": columns(12)}
    comparison = compare(base, cand, labels=("a.json", "b.json"))
    text = render_compare_report([comparison], {"a.json": base, "b.json": cand}, ["b.json"])
    checker = parse(text)
    assert {"cmp0-phases", "cmp0-step", "cmp0-memory"} <= set(checker.ids)
    assert comparison.verdict in text and "gate FAILED" in text
    assert checker.urls == []


def test_card_is_scoped_html_and_text_elsewhere(two_ranks: dict[str, Any]) -> None:
    html = card_html(two_ranks)
    parse(html)
    assert "Plotly" not in html and len(html) < 30_000
    assert str(SummaryCard(two_ranks)).startswith("TraceML")
    assert SummaryCard(two_ranks)._repr_html_() == html


def test_scoped_css_never_styles_the_page_around_it() -> None:
    css = scoped_css("body{margin:0}table,th{color:red}.bar{height:1px}")
    assert css == ".c{margin:0}.c table,.c th{color:red}.c .bar{height:1px}".replace(
        ".c", ".traceml-card"
    )
