"""Short text forms of numbers the panels share (times, ages, percentages).

Pure functions; a None number is "n/a", never 0. Milliseconds, megabytes and shares come from
`traceml.analysis.rules`, so the viewer writes numbers exactly as the summary card does.
"""

from __future__ import annotations

from traceml.analysis.rules import mb, ms, pct

__all__ = ["clock", "mb", "ms", "opt_pct", "pct", "signed_pct", "steps", "value"]


def clock(seconds: float | None) -> str:
    """Elapsed time as H:MM:SS (M:SS under an hour); "n/a" for None."""
    if seconds is None:
        return "n/a"
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def steps(count: float) -> str:
    """A step number on a chart's axis: "12,345"."""
    return f"{count:,.0f}"


def opt_pct(fraction: float | None) -> str:
    """A share 0..1 as "47 %"; "–" when not measured."""
    return "–" if fraction is None else pct(fraction)


def signed_pct(fraction: float | None) -> str:
    """A lag as "+12 %" / "-3.0 %"; "–" when unknown."""
    if fraction is None:
        return "–"
    text = pct(fraction)
    return text if text.startswith("-") else f"+{text}"


def value(number: float | None, unit: str, digits: int = 0) -> str:
    """ "97 %", "310 W"; "n/a" for None."""
    return "n/a" if number is None else f"{number:.{digits}f} {unit}"
