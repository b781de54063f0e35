"""Step-time rules: which phase eats the step (README, "Diagnoses", first rows).

Each rule compares the median over ranks of each rank's phase share with the thresholds. A phase
that was not measured (None) is skipped, never read as 0. Pure functions: no I/O, no torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from traceml.analysis.rules import cap, enough_steps, grade, ms, pct, rounded
from traceml.records import PHASES, Finding

if TYPE_CHECKING:
    from collections.abc import Sequence

    from traceml.analysis.view import RunView
    from traceml.config import Thresholds
    from traceml.records import Phase

TRACE_STEP_HINT = "Wrap each training step in `with traceml.trace_step(model):`"

INPUT_ACTION = (
    "Raise DataLoader num_workers, set pin_memory=True and persistent_workers=True, tune"
    " prefetch_factor; then check the dataset's __getitem__ (decoding, augmentation, file I/O)."
)
HOST_ACTION = (
    "Look outside the model: per-step logging, .item()/.cpu() host syncs, checkpoints or metrics"
    " in the loop (between) and loss, zero_grad or user code in the step (other); log every N"
    " steps and keep values on the GPU."
)
HOST_OTHER_ACTION = (
    "The time is inside the step but outside forward, backward and optimizer.step (other): the"
    " loss, zero_grad, gradient clipping, GradScaler's unscale_/update, a hand-written parameter"
    " update, metrics or .item() syncs. Compute metrics every N steps, use"
    " clip_grad_norm_(..., foreach=True) and zero_grad(set_to_none=True), and keep values on the"
    " device."
)
HOST_BETWEEN_ACTION = (
    "The time is outside trace_step and not in the DataLoader (between): per-step logging,"
    " .item()/.cpu() host syncs, checkpoints, evaluation or metrics in the loop. Log every N"
    " steps, keep values on the device, and checkpoint or evaluate less often."
)
H2D_ACTION = (
    "Use pin_memory=True and .to(device, non_blocking=True); copy smaller dtypes (uint8, bf16)"
    " and do preprocessing on the GPU."
)
OPTIMIZER_ACTION = (
    "Use a fused or foreach optimizer (e.g. AdamW(..., fused=True)), drop per-step grad-norm"
    " logging you do not need, or step less often with gradient accumulation."
)
FUSED_OPTIMIZERS = frozenset({"Adam", "AdamW", "SGD", "Adagrad"})
"""torch.optim classes with a `fused=True` implementation (and `foreach=True`)."""
FOREACH_OPTIMIZERS = frozenset({"Adadelta", "Adamax", "ASGD", "NAdam", "RAdam", "RMSprop", "Rprop"})
"""torch.optim classes with a multi-tensor `foreach=True` implementation but no fused one."""
LBFGS_ACTION = (
    "LBFGS's own work (its two-loop recursion over `history_size` past updates, and the loss and"
    " zero_grad inside your closure) is the cost here; the closure's forward and backward are"
    " already counted as forward and backward. Lower history_size or max_iter, or use"
    " line_search_fn='strong_wolfe' to converge in fewer evaluations."
)
COMPUTE_ACTION = (
    "The step is busy in the model: to go faster, use bf16 autocast, torch.compile or a larger"
    " batch, and profile kernels with torch.profiler."
)


def _ranks_note(view: RunView) -> str:
    n = len(view.active)
    return f", median over {n} ranks" if n > 1 else ""


@dataclass(frozen=True, slots=True)
class _Spec:
    kind: str
    phases: tuple[Phase, ...]
    warning: float
    critical: float
    action: str


def _share_finding(view: RunView, th: Thresholds, spec: _Spec) -> Finding | None:
    kind, phases, warning, critical = spec.kind, spec.phases, spec.warning, spec.critical
    share = view.median_group_share(phases) if enough_steps(view, th) else None
    severity = None if share is None else grade(share, warning, critical)
    if share is None or severity is None:
        return None
    phase_ms, step_ms = view.median_group_ms(phases), view.median_mean_ms()
    label = " + ".join(p for p in phases if view.median_share(p) is not None)
    return Finding(
        kind=kind,
        section="step_time",
        severity=cap(severity, view.steps, th),
        summary=f"{label} {pct(share)} of step time ({ms(phase_ms)} of a {ms(step_ms)} mean"
        f" step{_ranks_note(view)})",
        action=spec.action,
        evidence={
            "share": rounded(share, 4),
            "phase_ms": rounded(phase_ms),
            "step_ms": rounded(step_ms),
            "warning": warning,
            "critical": critical,
            "steps": view.steps,
            "ranks": len(view.active),
        },
    )


def input_bound(view: RunView, th: Thresholds) -> Finding | None:
    """INPUT_BOUND: the DataLoader's share reaches input_warning / input_critical."""
    spec = _Spec("INPUT_BOUND", ("dataloader",), th.input_warning, th.input_critical, INPUT_ACTION)
    return _share_finding(view, th, spec)


def host_action(view: RunView) -> str:
    """HOST_BOUND's advice, for the larger of its two parts (or both when neither dominates)."""
    other, between = view.median_share("other") or 0.0, view.median_share("between") or 0.0
    if other >= 2 * between:
        return HOST_OTHER_ACTION
    if between >= 2 * other:
        return HOST_BETWEEN_ACTION
    return HOST_ACTION


def host_bound(view: RunView, th: Thresholds) -> Finding | None:
    """HOST_BOUND: time outside the model (between + other) reaches host_warning / critical."""
    spec = _Spec(
        "HOST_BOUND", ("between", "other"), th.host_warning, th.host_critical, host_action(view)
    )
    return _share_finding(view, th, spec)


def h2d_bound(view: RunView, th: Thresholds) -> Finding | None:
    """H2D_BOUND: host-to-device copies reach h2d_warning / h2d_critical (GPU runs only)."""
    spec = _Spec("H2D_BOUND", ("h2d",), th.h2d_warning, th.h2d_critical, H2D_ACTION)
    return _share_finding(view, th, spec)


def optimizer_advice(name: str) -> str:
    """What to try for one optimizer class whose step is costly."""
    if name == "LBFGS":
        return LBFGS_ACTION
    if name in FUSED_OPTIMIZERS:
        return f"{name}(..., fused=True) (or foreach=True) runs its update in a few kernels"
    if name in FOREACH_OPTIMIZERS:
        return f"{name}(..., foreach=True) runs its update as multi-tensor kernels"
    return (
        f"{name} has no fused path in torch.optim: look for a fused or multi-tensor version of it"
    )


def optimizer_action(names: Sequence[str]) -> str:
    """The action for OPTIMIZER_BOUND, fitted to the optimizer classes the run stepped."""
    if not names:
        return OPTIMIZER_ACTION
    if tuple(names) == ("LBFGS",):
        return LBFGS_ACTION
    tips = "; ".join(optimizer_advice(n) for n in names)
    return (
        f"{tips}. Also drop per-step grad-norm logging you do not need, or step less often with"
        " gradient accumulation."
    )


def optimizer_bound(view: RunView, th: Thresholds) -> Finding | None:
    """OPTIMIZER_BOUND: optimizer.step reaches optimizer_warning / optimizer_critical."""
    spec = _Spec(
        "OPTIMIZER_BOUND",
        ("optimizer",),
        th.optimizer_warning,
        th.optimizer_critical,
        optimizer_action(view.optimizers),
    )
    found = _share_finding(view, th, spec)
    if found is None or not view.optimizers:
        return found
    names = ", ".join(view.optimizers)
    return dataclasses.replace(
        found,
        summary=found.summary.replace("optimizer ", f"optimizer ({names}) ", 1),
        evidence={**found.evidence, "optimizers": list(view.optimizers)},
    )


BOTTLENECK_RULES = (input_bound, host_bound, h2d_bound, optimizer_bound)
"""The step rules that, when any fires, keep COMPUTE_BOUND quiet."""


def compute_bound(view: RunView, th: Thresholds) -> Finding | None:
    """COMPUTE_BOUND (info): forward + backward >= compute_share and no bottleneck rule fired."""
    phases: tuple[Phase, ...] = ("forward", "backward")
    share = view.median_group_share(phases) if enough_steps(view, th) else None
    if share is None or share < th.compute_share:
        return None
    if any(rule(view, th) is not None for rule in BOTTLENECK_RULES):
        return None
    step_ms = view.median_mean_ms()
    return Finding(
        kind="COMPUTE_BOUND",
        section="step_time",
        severity="info",
        summary=f"forward + backward {pct(share)} of step time ({ms(view.median_group_ms(phases))}"
        f" of a {ms(step_ms)} mean step{_ranks_note(view)}): the step is real work",
        action=COMPUTE_ACTION,
        evidence={"share": rounded(share, 4), "step_ms": rounded(step_ms), "steps": view.steps},
    )


def warmup(view: RunView, th: Thresholds) -> Finding | None:
    """WARMUP (info): some steps, but fewer than `min_steps`: too early to judge."""
    if view.steps == 0 or enough_steps(view, th):
        return None
    waiting = "let the run go on" if view.kind == "live" else "run more steps"
    return Finding(
        kind="WARMUP",
        section="step_time",
        severity="info",
        summary=f"only {view.steps} step measured; a diagnosis needs at least {th.min_steps}",
        action=f"No action yet: {waiting}; median step so far {ms(view.median_ms())}.",
        evidence={"steps": view.steps, "min_steps": th.min_steps},
    )


def no_steps(view: RunView, th: Thresholds) -> Finding | None:
    """NO_STEPS: not one step recorded (a warning in a summary, info while live)."""
    if view.steps > 0:
        return None
    if view.kind == "live":
        return Finding(
            kind="NO_STEPS",
            section="step_time",
            severity="info",
            summary="waiting for the first step",
            action=f"If no step ever arrives: {TRACE_STEP_HINT}.",
        )
    return Finding(
        kind="NO_STEPS",
        section="step_time",
        severity="warning",
        summary="no training step was recorded, so there is nothing to diagnose",
        action=f"{TRACE_STEP_HINT} and run again (`traceml run` also needs it to see steps).",
    )


def balanced_step(view: RunView, th: Thresholds) -> Finding:
    """BALANCED (info): what diagnose reports when no step rule fired."""
    parts = [
        f"{name} {pct(share)}"
        for name, share in ((p, view.median_share(p)) for p in PHASES)
        if share is not None
    ]
    return Finding(
        kind="BALANCED",
        section="step_time",
        severity="info",
        summary=f"no phase above its threshold; median step {ms(view.median_ms())}"
        + (f" ({', '.join(parts)})" if parts else ""),
        action="Nothing to fix in the step's split; compare runs with `traceml compare A B`.",
        evidence={"median_ms": rounded(view.median_ms()), "steps": view.steps},
    )
