"""Run every rule family over a RunView and rank the findings, most severe first.

The rule lists are module-level and editable, like pyinstrument's processors. Pure: no I/O, no
state between calls, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from traceml.analysis import rules_memory, rules_ranks, rules_spikes, rules_step, rules_timeline
from traceml.config import DEFAULT_THRESHOLDS, Thresholds
from traceml.records import SEVERITY_ORDER, Finding

QUIET_KINDS = frozenset({"BALANCED", "NOT_MEASURED"})
"""Findings that say there is nothing to report: never listed among "other findings"."""

if TYPE_CHECKING:
    from collections.abc import Iterable

    from traceml.analysis.rules import Rule
    from traceml.analysis.view import RunView

STEP_RULES: list[Rule] = [
    rules_step.no_steps,
    rules_step.warmup,
    rules_step.input_bound,
    rules_step.host_bound,
    rules_step.h2d_bound,
    rules_step.optimizer_bound,
    rules_step.compute_bound,
]
"""Step-time rules in tie-break order (on equal severity the earlier one wins)."""

MEMORY_RULES: list[Rule] = [
    rules_memory.pressure,
    rules_memory.growing,
    rules_memory.fragmented,
    rules_memory.imbalanced,
]

TIME_RULES: list[Rule] = [
    rules_spikes.step_spikes,
    rules_timeline.regime_change,
]
"""What happened when: rare slow steps and a change of character. They never decide the
step verdict (made on typical steps) nor the primary finding; they follow it by severity."""

RANK_RULES: list[Rule] = [
    rules_ranks.input_straggler,
    rules_ranks.compute_straggler,
    rules_ranks.straggler,
]
"""Rank rules; they only fire for world_size > 1."""


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """The findings of one RunView: one per section plus every finding, most severe first."""

    step: Finding
    """The most severe step-time finding; BALANCED when no step rule fired."""
    memory: Finding
    """The most severe memory finding; BALANCED when no memory rule fired."""
    ranks: tuple[Finding, ...]
    """Rank findings, most severe first; () for one rank or when ranks are even."""
    findings: tuple[Finding, ...]
    """Every finding (rank, step, memory, over time; BALANCED ones included): the primary
    first, then the rest most severe first."""
    over_time: tuple[Finding, ...] = ()
    """STEP_SPIKES / REGIME_CHANGE findings, most severe first; () when none fired."""

    @property
    def primary(self) -> Finding:
        """The one finding to show first: a memory finding that will end the run (evidence
        `ends_run`), else the most severe; on ties a straggler wins (one slow rank makes every
        rank wait, so it is the cause the step-time shares only reflect), then step time, then
        memory. Over-time findings are never primary."""
        return self.findings[0]


def by_severity(findings: Iterable[Finding]) -> list[Finding]:
    """Findings that end the run first, then most severe first; a stable sort, so callers'
    order breaks ties."""
    return sorted(findings, key=lambda f: (not ends_run(f), -SEVERITY_ORDER[f.severity]))


def ends_run(finding: Finding) -> bool:
    """True for a memory finding that will end the run if nothing changes (out of memory)."""
    return bool(finding.evidence.get("ends_run"))


def _fired(rules: Iterable[Rule], view: RunView, th: Thresholds) -> list[Finding]:
    return by_severity(f for rule in rules if (f := rule(view, th)) is not None)


def diagnose(view: RunView, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> Diagnosis:
    """Apply STEP_RULES, RANK_RULES and MEMORY_RULES to `view`.

    Args:
        view: A live or summary view from RunStore.
        thresholds: The numbers the rules compare against.

    Returns:
        A Diagnosis whose `primary` is the most severe finding.
    """
    step = _fired(STEP_RULES, view, thresholds) or [rules_step.balanced_step(view, thresholds)]
    memory = _fired(MEMORY_RULES, view, thresholds) or [
        rules_memory.balanced_memory(view, thresholds)
    ]
    ranks = _fired(RANK_RULES, view, thresholds)
    over_time = _fired(TIME_RULES, view, thresholds)
    ranked = by_severity([*ranks, *step, *memory])
    return Diagnosis(
        step=step[0],
        memory=memory[0],
        ranks=tuple(ranks),
        findings=(ranked[0], *by_severity([*over_time, *ranked[1:]])),
        over_time=tuple(over_time),
    )
