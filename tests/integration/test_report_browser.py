"""`traceml report` and `traceml compare --html` end to end: real CLI processes write the pages,
a real headless Chromium (Playwright, Debian's /usr/bin/chromium) opens them offline.

Chromium comes from the system (`apt-get install chromium`; `.ci/run` installs it): Playwright's
own browser download needs a network. Without it the test skips and says so (README, Development).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import child_env, traceml_cmd
from tests.summaries import valid_summary
from tests.unit.test_report import columns, store_of

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _write(path: Path, summary: dict[str, Any]) -> Path:
    path.write_text(json.dumps(summary))
    return path


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        traceml_cmd(*args), capture_output=True, text=True, env=child_env(), timeout=60
    )


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("pages")
    base = _write(out / "base.json", valid_summary(store_of(ranks=2)))
    slow = valid_summary(store_of(ranks=2, slow_rank=1))
    slow["timeline"] = columns(64) if "timeline" not in slow else slow["timeline"]
    cand = _write(out / "cand.json", slow)
    report = _cli("report", str(cand), "-o", str(out / "report.html"))
    assert report.returncode == 0, report.stderr
    compared = _cli("compare", str(base), str(cand), "--html", str(out / "compare.html"))
    assert compared.returncode == 0, compared.stderr
    return out / "report.html", out / "compare.html"


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium: apt-get install chromium (README)")
def test_pages_open_offline_in_chromium_without_errors(pages: tuple[Path, Path]) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        try:
            for page_path, charts in zip(pages, (4, 3), strict=True):
                _check_page(browser, page_path, charts)
        finally:
            browser.close()


def _check_page(browser: Any, path: Path, charts: int) -> None:
    problems: list[str] = []
    requests: list[str] = []
    context = browser.new_context(offline=True)
    page = context.new_page()
    page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else 0)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.as_uri())
    page.wait_for_function(
        f"document.querySelectorAll('.js-plotly-plot .main-svg').length >= {charts}"
    )
    drawn = page.evaluate(
        "Array.from(document.querySelectorAll('.js-plotly-plot'))"
        ".map(d => d.data ? d.data.length : 0)"
    )
    context.close()
    assert problems == [], problems
    assert requests == [path.as_uri()], requests  # the page itself, nothing from outside
    assert len(drawn) == charts and all(n > 0 for n in drawn), drawn


def test_report_of_a_missing_run_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = _cli("report", "no-such-run", "-o", str(tmp_path / "r.html"))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "no-such-run" in done.stderr
    assert not (tmp_path / "r.html").exists()
