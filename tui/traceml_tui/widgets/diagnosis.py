"""The diagnosis: the primary finding with its numbers and the action, then the other findings.

Renders only from its `snapshot` reactive; the findings were computed by the feed with
`traceml.analysis.diagnose`, never here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from traceml.analysis.diagnose import QUIET_KINDS
from traceml_tui.snapshot import Snapshot, no_steps_text, stall_text
from traceml_tui.widgets.redraw import Redraw

if TYPE_CHECKING:
    from traceml.records import Finding

SEVERITY_STYLE = {
    "critical": "bold $error",
    "warning": "bold $warning",
    "info": "bold $success",
}
MAX_OTHERS = 6
"""Other findings listed below the primary one; the rest are counted."""


def _same(a: Finding, b: Finding) -> bool:
    return (a.kind, a.severity, a.summary) == (b.kind, b.severity, b.summary)


def _primary(finding: Finding) -> list[Content]:
    head = Content.assemble(
        (f"{finding.severity.upper()} ", SEVERITY_STYLE[finding.severity]), (finding.kind, "bold")
    )
    action = Content.assemble(("→ ", "bold $primary"), finding.action)
    return [head, Content(finding.summary), action]


def _other(finding: Finding) -> list[Content]:
    """A finding below the primary one: its summary, then its action, as on the card."""
    head = Content.assemble(
        ("• ", SEVERITY_STYLE[finding.severity]),
        (f"{finding.kind} ", "bold"),
        (f"({finding.severity}) ", "$text-muted"),
        finding.summary,
    )
    return [head, Content.assemble(("  → ", "bold $primary"), finding.action)]


def diagnosis_content(snap: Snapshot | None) -> Content:
    """The panel's text; pure, so tests can check it without an app."""
    empty = no_steps_text(snap)
    if snap is None or empty is not None:
        return Content(empty or "")
    diag = snap.diagnosis
    if diag is None:
        return Content("No findings in this summary.")
    primary = diag.primary
    others = [f for f in diag.findings if not _same(f, primary) and f.kind not in QUIET_KINDS]
    stall = stall_text(snap)
    lines = [Content.styled(f"⚠ {stall}", "bold $warning")] if stall else []
    lines += _primary(primary)
    if others:
        lines.append(Content.styled("Other findings", "bold"))
        lines += [line for f in others[:MAX_OTHERS] for line in _other(f)]
    if len(others) > MAX_OTHERS:
        lines.append(Content.styled(f"… {len(others) - MAX_OTHERS} more", "$text-muted"))
    return Content("\n").join(lines)


class DiagnosisPanel(Widget, can_focus=True):
    """What is wrong with the run, and what to do next."""

    BORDER_TITLE = "Diagnosis"

    snapshot: reactive[Snapshot | None] = reactive(None, always_update=True, repaint=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._redraw = Redraw(self)

    def watch_snapshot(self, snap: Snapshot | None) -> None:
        severity = snap.diagnosis.primary.severity if snap and snap.diagnosis else None
        for name in SEVERITY_STYLE:
            self.set_class(name == severity, f"-{name}")
        self._redraw.show(self.render())

    def render(self) -> Content:
        return diagnosis_content(self.snapshot)
