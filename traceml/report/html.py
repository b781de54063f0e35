"""The HTML building blocks every report shares: escaping, number formats, tables, the page shell.

Pure string building. Every value from a summary goes through `esc`; a null number renders as
"not measured" (or "n/a" in a dense table), never as 0.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence

from traceml.analysis.rules import mb, ms

NA = "n/a"
"""A null number in a table cell: not measured."""
CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;
 background:#f6f7f9;color:#1d2330}
main{max-width:1100px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
.facts{color:#566070;margin:0 0 16px}
.card{background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:14px 18px;margin:10px 0}
.verdict{border-left:6px solid #8a94a6}.verdict .kind{font-weight:700;font-size:18px}
.critical{border-left-color:#d64545}.warning{border-left-color:#e0a100}.info{border-left-color:#3a7bd5}
.good{border-left-color:#2e9e5b}
.sev{font-size:12px;font-weight:700;text-transform:uppercase;letter-spacing:.04em;color:#566070}
.action{margin-top:6px}.action b{color:#1d2330}
table{border-collapse:collapse;width:100%;background:#fff}
th,td{padding:4px 10px;border-bottom:1px solid #e6e9ee;text-align:right;white-space:nowrap}
th{background:#eef1f5;font-weight:600}td.l,th.l{text-align:left}
.bar{display:inline-block;height:10px;background:#3a7bd5;vertical-align:middle}
.muted{color:#8a94a6}.scroll{max-height:420px;overflow:auto}
.chart{background:#fff;border:1px solid #dde1e7;border-radius:8px;margin:10px 0;padding:4px}
.note{color:#566070;font-style:italic}
footer{color:#8a94a6;font-size:12px;margin-top:32px}
"""


def esc(value: object) -> str:
    """Any value as HTML text, quotes included."""
    return html.escape(str(value), quote=True)


def fmt_ms(value: float | None) -> str:
    return NA if value is None else ms(value)


def fmt_mb(value: float | None) -> str:
    return NA if value is None else mb(value)


def fmt_pct(value: float | None, signed: bool = False) -> str:
    """A percentage already in percent (47.1 -> "47.1 %")."""
    if value is None:
        return NA
    return f"{value:+.1f} %" if signed else f"{value:.1f} %"


def fmt_num(value: object) -> str:
    if value is None:
        return NA
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    align: Sequence[str] = (),
    scroll: bool = False,
) -> str:
    """A table of already-escaped cells; `align` gives each column "l" or "r" (default "r")."""

    def cls(i: int) -> str:
        return ' class="l"' if i < len(align) and align[i] == "l" else ""

    head = "".join(f"<th{cls(i)}>{h}</th>" for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(f"<td{cls(i)}>{c}</td>" for i, c in enumerate(row)) + "</tr>"
        for row in rows
    )
    out = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    return f'<div class="scroll">{out}</div>' if scroll else out


def page(title: str, body: str, *, script: str = "", footer: str = "") -> str:
    """A complete HTML document: inline CSS, `script` (e.g. plotly.js) inlined in the head."""
    head_script = f'<script type="text/javascript">{script}</script>' if script else ""
    foot = f"<footer>{footer}</footer>" if footer else ""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style>{head_script}</head>"
        f"<body><main>{body}{foot}</main></body></html>\n"
    )
