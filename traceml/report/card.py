"""The summary card as HTML for notebooks (`traceml.show()`), the text card everywhere else.

No charts and no script: a notebook output stays a few KB. The card's CSS is scoped under
`.traceml-card`, so it never restyles the notebook around it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from traceml.report import sections
from traceml.report.html import CSS

SCOPE = "traceml-card"
MAX_RANK_ROWS = 16
"""Rank rows on the card; bigger jobs show their most lagging ranks."""
_RULE = re.compile(r"([^{}]+)\{([^{}]*)\}")


def scoped_css(css: str, scope: str = SCOPE) -> str:
    """Every rule of `css` limited to elements inside `.scope` (body and main become it)."""

    def one(selector: str) -> str:
        selector = selector.strip()
        if selector in ("body", "main"):
            return f".{scope}"
        return f".{scope} {selector}"

    rules = (
        ",".join(one(s) for s in m[1].split(",")) + "{" + m[2] + "}" for m in _RULE.finditer(css)
    )
    return "".join(rules)


def card_html(summary: Mapping[str, Any]) -> str:
    """The card as one self-contained HTML fragment: verdict, step time and phases, memory,
    ranks (multi-rank runs), other findings."""
    step = summary["step_time"]
    parts = [
        sections.header(summary, tag="h3"),
        sections.verdict(summary),
        "<h4>Step time</h4>",
        sections.step_numbers(step),
        sections.phase_table(step),
        "<h4>Memory</h4>",
        sections.memory(summary["step_memory"]),
    ]
    if len(summary["ranks"]) > 1:
        parts += ["<h4>Ranks</h4>", sections.ranks(summary["ranks"], limit=MAX_RANK_ROWS)]
    if sections.other_findings(summary):
        parts += ["<h4>Other findings</h4>", sections.findings(summary)]
    style = f"<style>{scoped_css(CSS)}</style>"
    return f'<div class="{SCOPE}">{style}{"".join(parts)}</div>'


class SummaryCard:
    """A summary that Jupyter displays as the HTML card and Python prints as the text card."""

    def __init__(self, summary: Mapping[str, Any]) -> None:
        self.summary = summary

    def _repr_html_(self) -> str:
        return card_html(self.summary)

    def __str__(self) -> str:
        from traceml.analysis.render import render_card

        return render_card(self.summary)

    def __repr__(self) -> str:
        return str(self)
