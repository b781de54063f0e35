"""`traceml export otlp`: push the followed runs' metrics over OTLP/HTTP with opentelemetry-sdk.

The same metrics as /metrics (traceml.export.metrics), as observable instruments read at each
export, plus `traceml.step.duration`, a histogram recorded on the follower thread from each step
record the first time it is seen. The SDK's reader thread exports every `every_s` seconds; an
unreachable collector is the SDK's warning, never the job's problem. Imports opentelemetry only
here.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from traceml.config import DEFAULT_THRESHOLDS, Thresholds
from traceml.errors import ConfigError
from traceml.export.follower import Followed, Follower
from traceml.export.histogram import BUCKETS_S
from traceml.export.metrics import ALL, STEP_DURATION, Metric, Sample, run_samples

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, Observation
    from opentelemetry.sdk.metrics import MeterProvider

    from traceml.records import StepRecord

EXPORT_TIMEOUT_S = 5.0
"""Most one export may wait on the collector (also bounds close())."""
FRESH_S = 0.5
"""Samples built at most this long ago are reused by the next instrument's callback: one export
reads every instrument, and the store is read once for all of them."""


def _sdk() -> Any:
    try:
        from opentelemetry.exporter.otlp.proto.http import metric_exporter
    except ImportError as e:
        raise ConfigError(
            "the OTLP exporter is not installed: pip install 'traceml-ai[otlp]'"
        ) from e
    return metric_exporter


class OnceFilter(logging.Filter):
    """Passes each distinct message once (numbers ignored): an unreachable collector is one
    warning, not three lines per export for as long as it stays down."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        key = re.sub(r"[\d.]+", "#", record.getMessage())[:200]
        if key in self._seen or len(self._seen) > 100:
            return False
        self._seen.add(key)
        return True


def log_failures_once() -> None:
    """Route the OpenTelemetry SDK's log lines to stderr, each distinct one once (the CLI)."""
    handler = logging.StreamHandler()
    handler.addFilter(OnceFilter())
    handler.setFormatter(logging.Formatter("traceml export otlp: %(message)s"))
    sdk = logging.getLogger("opentelemetry")
    sdk.addHandler(handler)
    sdk.propagate = False


class _Samples:
    """The followed runs' samples, rebuilt at most every FRESH_S (callbacks run one by one)."""

    def __init__(self, follower: Follower, thresholds: Thresholds) -> None:
        self.follower = follower
        self.thresholds = thresholds
        self._built = -float("inf")
        self._by_metric: dict[Metric, list[Sample]] = {}
        self._lock = threading.Lock()

    def of(self, metric: Metric) -> list[Sample]:
        with self._lock:
            now = time.monotonic()
            if now - self._built > FRESH_S:
                self._built = now
                self._by_metric = {}
                for run in self.follower.runs():
                    for s in run_samples(run.store, self.thresholds):
                        self._by_metric.setdefault(s.metric, []).append(s)
            return self._by_metric.get(metric, [])


def _callback(
    samples: _Samples, metric: Metric
) -> Callable[[CallbackOptions], Iterable[Observation]]:
    from opentelemetry.metrics import Observation

    def observe(_options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(s.value, dict(zip(metric.labels, s.labels, strict=True)))
            for s in samples.of(metric)
        ]

    return observe


class OtlpExporter:
    """Follows `run` (or every live run) and pushes its metrics to `endpoint` every `every_s`.

    Args:
        endpoint: OTLP/HTTP metrics URL, e.g. http://localhost:4318/v1/metrics.
        run: Run id or prefix; None = the newest live run. Ignored with `follow_all`.
        follow_all: Follow every live run as they come and go.
        every_s: Seconds between two exports.
        runtime_dir: Where runs live (tests).
    """

    def __init__(
        self,
        endpoint: str,
        *,
        run: str | None = None,
        follow_all: bool = False,
        every_s: float = 10.0,
        runtime_dir: Any = None,
        thresholds: Thresholds = DEFAULT_THRESHOLDS,
    ) -> None:
        self.endpoint = endpoint
        self.every_s = every_s
        self.follower = Follower(
            run,
            follow_all=follow_all,
            runtime_dir=runtime_dir,
            thresholds=thresholds,
            on_steps=self._record,
        )
        self._samples = _Samples(self.follower, thresholds)
        self._provider: MeterProvider | None = None
        self._histogram: Any = None

    def start(self) -> OtlpExporter:
        """Attach, then start the SDK's reader thread and the follower's.

        Raises:
            ConfigError: the OpenTelemetry packages are not installed.
            RunNotFoundError / TransportError: see Follower.open.
        """
        exporter_module = _sdk()
        self.follower.open()
        self._provider = self._make_provider(exporter_module)
        meter = self._provider.get_meter("traceml")
        for metric in ALL:
            make = (
                meter.create_observable_counter
                if metric.kind == "counter"
                else (meter.create_observable_gauge)
            )
            make(metric.name, [_callback(self._samples, metric)], metric.unit, metric.help)
        self._histogram = meter.create_histogram(
            STEP_DURATION.name, STEP_DURATION.unit, STEP_DURATION.help
        )
        self.follower.start()
        return self

    def _make_provider(self, exporter_module: Any) -> MeterProvider:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
        from opentelemetry.sdk.resources import Resource

        exporter = exporter_module.OTLPMetricExporter(
            endpoint=self.endpoint, timeout=EXPORT_TIMEOUT_S
        )
        reader = PeriodicExportingMetricReader(
            exporter,
            export_interval_millis=self.every_s * 1000,
            export_timeout_millis=EXPORT_TIMEOUT_S * 1000,
        )
        buckets = View(
            instrument_name=STEP_DURATION.name,
            aggregation=ExplicitBucketHistogramAggregation(list(BUCKETS_S)),
        )
        resource = Resource.create({"service.name": "traceml"})
        return MeterProvider(metric_readers=[reader], resource=resource, views=[buckets])

    def _record(self, run: Followed, records: Sequence[StepRecord]) -> None:
        if self._histogram is None:
            return
        labels: dict[int, dict[str, str]] = {}
        for rec in records:
            attrs = labels.get(rec.rank)
            if attrs is None:
                info = run.store.info(rec.rank)
                attrs = labels[rec.rank] = {
                    "run_id": run.run_id,
                    "script": info.script if info else run.entry.script,
                    "rank": str(rec.rank),
                    "host": info.host if info else "",
                }
            self._histogram.record(rec.step_ms / 1000.0, attrs)

    def flush(self) -> bool:
        """Export now (tests, and the last values before close)."""
        if self._provider is None:
            return False
        return bool(self._provider.force_flush(int(EXPORT_TIMEOUT_S * 1000)))

    def close(self) -> None:
        """Stop following, export once more and shut the SDK down; idempotent."""
        self.follower.close()
        provider, self._provider = self._provider, None
        if provider is not None:
            provider.shutdown(timeout_millis=EXPORT_TIMEOUT_S * 1000)
