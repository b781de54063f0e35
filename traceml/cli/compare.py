"""`traceml compare BASELINE RUN... [--json] [--fail-on-regression PCT]`: where the time moved.

Reads summaries, compares each run against the baseline and prints; never writes a file, never
imports torch or textual. Bad input raises a TraceMLError, which main turns into one line and exit
code 2; exit code 1 means only that the --fail-on-regression gate found a run that slowed down.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from traceml.analysis.compare import Comparison, compare, signed_pct
from traceml.analysis.summary import load_summary
from traceml.errors import ConfigError

SUMMARY_NAME = "final_summary.json"
EPILOG = """\
A folder means its final_summary.json, or (for RUN) every */final_summary.json below it.
Exit codes: 0 compared (and the gate passed), 1 a run's median step time grew by more than
--fail-on-regression PCT percent, 2 bad input (one line on stderr).
"""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="compare runs against a baseline run: where the step time moved",
        description="Compare one or more runs against a baseline run, verdict first.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("baseline", metavar="BASELINE", type=Path, help="the reference summary")
    parser.add_argument(
        "runs", metavar="RUN", type=Path, nargs="+", help="summaries (or folders) to compare"
    )
    parser.add_argument("--json", action="store_true", help="print a traceml.compare/1 object")
    parser.add_argument(
        "--html", metavar="OUT", type=Path, default=None, help="also write the comparison as HTML"
    )
    parser.add_argument(
        "--fail-on-regression",
        metavar="PCT",
        type=float,
        default=None,
        help="exit 1 when a run's median step time grew by more than PCT percent",
    )


def resolve_baseline(path: Path) -> Path:
    """A folder means the final_summary.json in it; a folder of many runs is an error.

    Raises:
        ConfigError: the folder holds no summary of its own but several runs below it.
    """
    if not path.is_dir():
        return path
    direct = path / SUMMARY_NAME
    if direct.is_file() or not any(path.glob(f"*/{SUMMARY_NAME}")):
        return direct
    raise ConfigError(f"{path} holds several runs: pass one {SUMMARY_NAME} as the baseline")


def resolve_runs(paths: list[Path]) -> list[Path]:
    """Files as given; a folder gives its final_summary.json, else every */final_summary.json.

    Raises:
        ConfigError: a folder holds no summary at all.
    """
    found: list[Path] = []
    for path in paths:
        if not path.is_dir():
            found.append(path)
        elif (path / SUMMARY_NAME).is_file():
            found.append(path / SUMMARY_NAME)
        else:
            below = sorted(path.glob(f"*/{SUMMARY_NAME}"))
            if not below:
                raise ConfigError(f"no {SUMMARY_NAME} in {path} or in its sub-folders")
            found += below
    return found


def candidates(runs: list[Path], baseline: Path) -> list[Path]:
    """The runs without duplicates and without the baseline itself (unless it is all there is)."""
    seen = {_key(baseline)}
    kept = []
    for run in runs:
        if _key(run) not in seen:
            seen.add(_key(run))
            kept.append(run)
    return kept or runs[:1]


def _key(path: Path) -> Path:
    return path.resolve() if path.exists() else path.absolute()


def gate_limit(value: float | None) -> float | None:
    """Check --fail-on-regression: a finite percentage of at least 0.

    Raises:
        ConfigError: a negative, infinite or NaN value.
    """
    if value is not None and (not math.isfinite(value) or value < 0):
        raise ConfigError(f"--fail-on-regression {value:g}: use a percentage of 0 or more, e.g. 5")
    return value


def gate_line(comparisons: list[Comparison], failing: list[str], limit: float) -> str:
    """The last line of the text output when a gate is set."""
    if failing:
        count = f"{len(failing)} of {len(comparisons)} run(s)"
        return f"gate FAILED: {count} slowed by more than {limit:g} %: {', '.join(failing)}"
    worst = max((c.step_median_ms.ratio or 0.0 for c in comparisons), default=0.0)
    return f"gate passed: no run slowed by more than {limit:g} % (worst {signed_pct(worst)})"


def compare_all(baseline: Path, runs: list[Path]) -> list[Comparison]:
    """Load every summary (all errors surface before anything prints) and compare each run."""
    base = load_summary(baseline)
    loaded = [(run, load_summary(run)) for run in runs]
    return [compare(base, summary, labels=(str(baseline), str(run))) for run, summary in loaded]


def run(args: argparse.Namespace) -> int:
    from traceml.analysis.compare_render import (
        failing_runs,
        render_comparison,
        render_table,
        report_to_json,
    )

    limit = gate_limit(args.fail_on_regression)
    baseline = resolve_baseline(args.baseline)
    comparisons = compare_all(baseline, candidates(resolve_runs(args.runs), baseline))
    failing = failing_runs(comparisons, limit)
    if args.html is not None:
        from traceml.cli.report import write_compare_html

        write_compare_html(comparisons, failing, args.html)
    if args.json:
        print(json.dumps(report_to_json(comparisons, limit), indent=2))
    else:
        one = len(comparisons) == 1
        print(render_comparison(comparisons[0]) if one else render_table(comparisons), end="")
        if limit is not None:
            print(gate_line(comparisons, failing, limit))
    return 1 if failing else 0
