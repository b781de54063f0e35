"""`traceml report SUMMARY|RUN [-o report.html]`: a run's summary as one standalone HTML file.

SUMMARY is a final_summary.json or the folder that holds one; anything else is a run id (or unique
prefix) as `traceml show` takes it. The page inlines plotly.js, so it opens without a network.
Bad input raises a TraceMLError, which main turns into one line and exit code 2. Never torch.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from traceml.errors import ConfigError

if TYPE_CHECKING:
    from traceml.analysis.compare import Comparison

DEFAULT_NAME = "report.html"


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "report",
        help="write a run's summary as one HTML file with charts (opens offline)",
        description="Write a final_summary.json as a standalone HTML report: verdict and action,"
        " phase split, the run over time, memory, ranks.",
    )
    parser.add_argument(
        "summary",
        metavar="SUMMARY|RUN",
        type=Path,
        help="a final_summary.json, the folder that holds one, or a run id (see traceml ls --all)",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        default=Path(DEFAULT_NAME),
        help=f"where to write the HTML (default ./{DEFAULT_NAME}; '-' prints it)",
    )


def write_html(text: str, path: Path) -> Path:
    """Write `text` to `path` (creating its folder); '-' prints it instead.

    Raises:
        ConfigError: the file cannot be written.
    """
    if str(path) == "-":
        print(text, end="")
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot write {path}: {e.strerror or e}") from e
    return path


def plotly_missing() -> ConfigError:
    return ConfigError(
        "the HTML report needs plotly: pip install 'traceml-ai[report]' (or pip install plotly)"
    )


def run(args: argparse.Namespace) -> int:
    from traceml.analysis.summary import load_summary
    from traceml.cli.show import resolve

    path = resolve(args.summary)
    summary = load_summary(path)
    try:
        from traceml.report.run import render_report
    except ModuleNotFoundError as e:
        if not str(e.name).startswith("plotly"):
            raise
        raise plotly_missing() from e
    out = write_html(render_report(summary, source=str(path)), args.output)
    if str(out) != "-":
        print(f"traceml: report written to {out}")
    return 0


def write_compare_html(comparisons: Sequence[Comparison], failing: list[str], out: Path) -> Path:
    """`traceml compare --html OUT`: the comparison as a standalone page (the summaries are read
    again by their labels, which are their paths, for their timelines).

    Raises:
        ConfigError: plotly is missing, or OUT cannot be written.
    """
    from traceml.analysis.summary import load_summary

    labels = {c.baseline.label for c in comparisons} | {c.candidate.label for c in comparisons}
    summaries = {label: load_summary(Path(label)) for label in labels}
    try:
        from traceml.report.compare import render_compare_report
    except ModuleNotFoundError as e:
        if not str(e.name).startswith("plotly"):
            raise
        raise plotly_missing() from e
    path = write_html(render_compare_report(comparisons, summaries, failing), out)
    if str(path) != "-":
        print(f"traceml: comparison written to {path}", file=sys.stderr)
    return path
