"""The metrics every exporter publishes, read from a RunStore's live view: one list of samples.

Names follow OpenTelemetry (`traceml.step.median`, unit "s"); the Prometheus name is what an
OpenTelemetry Collector's Prometheus exporter makes of it (`traceml_step_median_seconds`), so one
Grafana dashboard reads either path. A value that was not measured gives no sample, never a 0.
Pure: no I/O, no exporter library, no torch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from traceml.analysis.diagnose import diagnose
from traceml.analysis.rules_ranks import rank_lags
from traceml.config import DEFAULT_THRESHOLDS, Thresholds
from traceml.records import PHASES, SEVERITY_ORDER

if TYPE_CHECKING:
    from traceml.analysis.store import RunStore
    from traceml.analysis.view import RankWindow, RunView
    from traceml.records import StepRecord, SystemSample

MetricKind = Literal["gauge", "counter", "info"]
MIB = 1024.0 * 1024.0
"""Records hold memory in MiB ("MB" in their names); metrics carry bytes."""
RANK_LABELS = ("run_id", "script", "rank", "host")
RUN_LABELS = ("run_id", "script")
RANK_STATES = ("live", "stalled", "dead", "finished")
UNIT_SUFFIX = {"s": "seconds", "By": "bytes", "1": "ratio", "W": "watts", "Cel": "celsius"}
"""How an OpenTelemetry unit becomes a Prometheus name suffix; "{...}" units add none."""


@dataclass(frozen=True, slots=True)
class Metric:
    """What one metric is: its name, kind, unit and labels."""

    name: str
    """OpenTelemetry name, dotted: `traceml.step.median`."""
    kind: MetricKind
    unit: str
    """UCUM unit as OpenTelemetry takes it: "s", "By", "1", "W", "Cel", or "{step}"."""
    help: str
    labels: tuple[str, ...] = RANK_LABELS

    @property
    def prom_name(self) -> str:
        """Prometheus family name, without the `_total` that the client library adds to counters
        (an "info" metric is exposed as the gauge it is in the text format: `..._info` = 1)."""
        base = self.name.replace(".", "_")
        suffix = UNIT_SUFFIX.get(self.unit)
        return f"{base}_{suffix}" if suffix and self.kind == "gauge" else base


@dataclass(frozen=True, slots=True)
class Sample:
    """One value of one metric for one label set (values in `metric.labels` order)."""

    metric: Metric
    labels: tuple[str, ...]
    value: float


def _m(name: str, unit: str, help_: str, *extra: str, kind: MetricKind = "gauge") -> Metric:
    return Metric(name, kind, unit, help_, (*RANK_LABELS, *extra))


STEPS = _m("traceml.steps", "{step}", "Steps the rank has run.", kind="counter")
STEP_MEDIAN = _m("traceml.step.median", "s", "Median step time over the live window.")
STEP_P95 = _m("traceml.step.p95", "s", "95th percentile step time over the live window.")
STEP_MEAN = _m("traceml.step.mean", "s", "Mean step time over the live window.")
STEP_DURATION = _m("traceml.step.duration", "s", "Step time of every step the exporter saw.")
PHASE_SHARE = _m("traceml.phase.share", "1", "Share of step time per phase (0..1).", "phase")
PHASE_TIME = _m("traceml.phase.time", "s", "Mean time per step in each phase.", "phase")
COMM_WAIT = _m("traceml.comm.wait", "s", "Mean DDP all-reduce wait per step (part of backward).")
COMM_SHARE = _m("traceml.comm.wait.share", "1", "Share of step time waiting for all-reduce.")
RANK_LAG = _m(
    "traceml.rank.lag",
    "1",
    "Extra time per step versus the median rank, as a fraction of its step.",
)
RANK_STATE = _m("traceml.rank.state", "{state}", "1 for the rank's liveness state.", "state")
DROPPED = _m("traceml.records.dropped", "{record}", "Records the rank dropped.", kind="counter")
HOST_RSS = _m("traceml.host.rss", "By", "Resident memory of the rank's process, last step.")
DEVICE_ALLOCATED = _m("traceml.device.allocated", "By", "CUDA memory allocated, last step.")
DEVICE_RESERVED = _m("traceml.device.reserved", "By", "CUDA memory reserved, last step.")
DEVICE_PEAK = _m("traceml.device.peak_allocated", "By", "Peak CUDA allocated, live window.")
DEVICE_CAPACITY = _m("traceml.device.capacity", "By", "Total memory of the rank's GPU.")
PROCESS_CPU = _m("traceml.process.cpu", "1", "CPU of the rank's process (1 = one core).")
HOST_CPU = _m("traceml.host.cpu", "1", "CPU of the rank's host (1 = every core busy).")
HOST_MEMORY = _m("traceml.host.memory.used", "By", "Memory used on the rank's host.")
GPU_UTIL = _m("traceml.gpu.utilization", "1", "NVML utilisation of the rank's GPU (0..1).")
GPU_MEMORY = _m("traceml.gpu.memory.used", "By", "NVML memory used on the rank's GPU.")
GPU_POWER = _m("traceml.gpu.power", "W", "Power draw of the rank's GPU.")
GPU_TEMP = _m("traceml.gpu.temperature", "Cel", "Temperature of the rank's GPU.")
DIAGNOSIS = Metric(
    "traceml.diagnosis.info",
    "info",
    "",
    "The run's primary diagnosis over the live window.",
    (*RUN_LABELS, "kind", "section", "severity"),
)
SEVERITY = Metric(
    "traceml.diagnosis.severity",
    "gauge",
    "{severity}",
    "Severity of the primary diagnosis: 0 info, 1 warning, 2 critical.",
    RUN_LABELS,
)
RANKS = Metric("traceml.run.ranks", "gauge", "{rank}", "Ranks the exporter sees.", RUN_LABELS)

ALL: tuple[Metric, ...] = (
    STEPS,
    STEP_MEDIAN,
    STEP_P95,
    STEP_MEAN,
    PHASE_SHARE,
    PHASE_TIME,
    COMM_WAIT,
    COMM_SHARE,
    RANK_LAG,
    RANK_STATE,
    DROPPED,
    HOST_RSS,
    DEVICE_ALLOCATED,
    DEVICE_RESERVED,
    DEVICE_PEAK,
    DEVICE_CAPACITY,
    PROCESS_CPU,
    HOST_CPU,
    HOST_MEMORY,
    GPU_UTIL,
    GPU_MEMORY,
    GPU_POWER,
    GPU_TEMP,
    DIAGNOSIS,
    SEVERITY,
    RANKS,
)
"""Every metric built from the store, in exposition order (the step histogram is apart:
each exporter aggregates it from the records it sees, see StepHistogram)."""


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000.0


def _bytes(mb: float | None) -> float | None:
    return None if mb is None else mb * MIB


def _ratio(pct: float | None) -> float | None:
    return None if pct is None else pct / 100.0


LATEST_OF = 64
"""Records searched back for the latest memory reading: host RSS is read at most every 10 ms
(traceml.instrument.timer.RSS_INTERVAL_NS), so a 1 ms step often carries none."""


@dataclass(frozen=True, slots=True)
class Memory:
    """A rank's latest memory readings in MiB; None = not measured in the last LATEST_OF steps."""

    host_rss_mb: float | None = None
    device_allocated_mb: float | None = None
    device_reserved_mb: float | None = None


def _latest(records: list[StepRecord], field: str) -> float | None:
    for rec in reversed(records):
        value: float | None = getattr(rec, field)
        if value is not None:
            return value
    return None


def latest_memory(store: RunStore, rank: int) -> Memory:
    """The newest reading of each memory field among the rank's last LATEST_OF records."""
    recent = store.recent(rank, LATEST_OF)
    return Memory(
        _latest(recent, "host_rss_mb"),
        _latest(recent, "device_allocated_mb"),
        _latest(recent, "device_reserved_mb"),
    )


def _step_values(w: RankWindow, mem: Memory) -> Iterator[tuple[Metric, float | None]]:
    yield STEPS, float(w.total_steps)
    yield STEP_MEDIAN, _seconds(w.median_ms)
    yield STEP_P95, _seconds(w.p95_ms)
    yield STEP_MEAN, _seconds(w.mean_ms)
    yield COMM_WAIT, _seconds(w.comm_wait_ms)
    yield COMM_SHARE, w.comm_wait_share
    yield DROPPED, float(w.dropped)
    yield HOST_RSS, _bytes(mem.host_rss_mb)
    yield DEVICE_ALLOCATED, _bytes(mem.device_allocated_mb)
    yield DEVICE_RESERVED, _bytes(mem.device_reserved_mb)
    yield DEVICE_PEAK, _bytes(w.device_peak_allocated_mb)
    yield DEVICE_CAPACITY, _bytes(w.device_capacity_mb)


def _system_values(s: SystemSample) -> Iterator[tuple[Metric, float | None]]:
    yield PROCESS_CPU, _ratio(s.process_cpu_pct)
    yield HOST_CPU, _ratio(s.host_cpu_pct)
    yield HOST_MEMORY, _bytes(s.host_mem_used_mb)
    yield GPU_UTIL, _ratio(s.gpu_util_pct)
    yield GPU_MEMORY, _bytes(s.gpu_mem_used_mb)
    yield GPU_POWER, s.gpu_power_w
    yield GPU_TEMP, s.gpu_temp_c


def rank_labels(view: RunView, w: RankWindow) -> tuple[str, str, str, str]:
    """(run_id, script, rank, host) of one rank."""
    return (view.run_id, view.script, str(w.rank), w.host)


def _rank_samples(
    store: RunStore, view: RunView, w: RankWindow, lag: float | None
) -> Iterator[Sample]:
    labels = rank_labels(view, w)
    values = list(_step_values(w, latest_memory(store, w.rank)))
    values.append((RANK_LAG, lag))
    system = store.last_system(w.rank)
    if system is not None:
        values += _system_values(system)
    for metric, value in values:
        if value is not None:
            yield Sample(metric, labels, value)
    for phase, share, ms in zip(PHASES, w.phase_share, w.phase_ms, strict=True):
        if share is not None:
            yield Sample(PHASE_SHARE, (*labels, phase), share)
        if ms is not None:
            yield Sample(PHASE_TIME, (*labels, phase), ms / 1000.0)
    for state in RANK_STATES:
        yield Sample(RANK_STATE, (*labels, state), 1.0 if w.state == state else 0.0)


def _run_samples(view: RunView, thresholds: Thresholds) -> Iterator[Sample]:
    run = (view.run_id, view.script)
    yield Sample(RANKS, run, float(len(view.ranks)))
    primary = diagnose(view, thresholds).primary
    yield Sample(DIAGNOSIS, (*run, primary.kind, primary.section, primary.severity), 1.0)
    yield Sample(SEVERITY, run, float(SEVERITY_ORDER[primary.severity]))


def run_samples(store: RunStore, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> list[Sample]:
    """Every metric of one run as it is now (safe from any thread: the store locks itself).

    Args:
        store: The run's store, fed by a Follower.
        thresholds: Live window and diagnosis thresholds.

    Returns:
        Samples in ALL order per rank; none at all before the first rank is known.
    """
    view = store.live_view()
    if not view.ranks:
        return []
    lags = {lag.rank: lag.lag for lag in rank_lags(view, thresholds)}
    samples = list(_run_samples(view, thresholds))
    for w in view.ranks:
        samples += _rank_samples(store, view, w, lags.get(w.rank))
    return samples
