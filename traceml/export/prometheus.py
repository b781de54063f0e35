"""`traceml export prometheus`: serve the followed runs' metrics on /metrics with prometheus-client.

A custom collector builds every family from the follower's stores when Prometheus scrapes (on
the HTTP server's thread), so nothing is computed between scrapes. Binds 127.0.0.1 unless told
otherwise; a port that cannot be bound is a TransportError (one line, exit 2), and the job never
notices either way. Imports prometheus_client only here.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from traceml.config import DEFAULT_THRESHOLDS, Thresholds
from traceml.errors import ConfigError, TransportError
from traceml.export.metrics import ALL, STEP_DURATION, Metric, Sample, run_samples

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from traceml.export.follower import Followed, Follower

DEFAULT_PORT = 9464
"""The port OpenTelemetry's Prometheus exporter uses by convention."""
DEFAULT_HOST = "127.0.0.1"


def _client() -> Any:
    try:
        import prometheus_client.core as core
    except ImportError as e:
        raise ConfigError(
            "prometheus-client is not installed: pip install 'traceml-ai[prometheus]'"
        ) from e
    return core


def _family(core: Any, metric: Metric) -> Any:
    if metric.kind == "counter":
        return core.CounterMetricFamily(metric.prom_name, metric.help, labels=metric.labels)
    return core.GaugeMetricFamily(metric.prom_name, metric.help, labels=metric.labels)


def _histogram(core: Any, runs: Iterable[Followed]) -> Any:
    family = core.HistogramMetricFamily(
        STEP_DURATION.prom_name, STEP_DURATION.help, labels=STEP_DURATION.labels
    )
    for run in runs:
        for rank, buckets in run.histogram.buckets().items():
            info = run.store.info(rank)
            labels = [
                info.run_id if info else run.run_id,
                info.script if info else run.entry.script,
                str(rank),
                info.host if info else "",
            ]
            family.add_metric(labels, buckets.cumulative(), buckets.sum_s)
    return family


class TraceMLCollector:
    """prometheus-client collector over a Follower's runs (any thread; the stores lock)."""

    def __init__(self, follower: Follower, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> None:
        self.follower = follower
        self.thresholds = thresholds
        self._core = _client()

    def collect(self) -> Iterator[Any]:
        runs = self.follower.runs()
        by_metric: dict[Metric, list[Sample]] = {m: [] for m in ALL}
        for run in runs:
            for sample in run_samples(run.store, self.thresholds):
                by_metric[sample.metric].append(sample)
        for metric, samples in by_metric.items():
            family = _family(self._core, metric)
            for s in samples:
                family.add_metric(list(s.labels), s.value)
            yield family
        yield _histogram(self._core, runs)
        runs_family = self._core.GaugeMetricFamily(
            "traceml_exporter_runs", "Runs this exporter follows now."
        )
        runs_family.add_metric([], float(len(runs)))
        yield runs_family


class PrometheusServer:
    """The /metrics endpoint: prometheus-client's HTTP server on its own daemon thread."""

    def __init__(
        self,
        follower: Follower,
        *,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        thresholds: Thresholds = DEFAULT_THRESHOLDS,
    ) -> None:
        self.follower = follower
        self.host = host
        self.port = port
        self.thresholds = thresholds
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> PrometheusServer:
        """Bind and serve.

        Raises:
            ConfigError: prometheus-client is not installed.
            TransportError: the address cannot be bound (in use, not ours, bad host).
        """
        collector = TraceMLCollector(self.follower, self.thresholds)
        from prometheus_client import CollectorRegistry, start_http_server

        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        try:
            self._server, self._thread = start_http_server(self.port, self.host, registry)
        except OSError as e:
            why = e.strerror or str(e)
            raise TransportError(
                f"cannot serve /metrics on {self.host}:{self.port}: {why}"
                " (pick another with --port)"
            ) from e
        self.port = self._server.server_port
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving; idempotent."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
