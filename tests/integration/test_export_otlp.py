"""The OTLP exporter against a real OTLP/HTTP receiver: an HTTP server in the test that decodes
each request with opentelemetry-proto (the real wire format), fed by a real publisher."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from tests.conftest import child_env, traceml_cmd
from tests.integration._publisher_proc import TxLoop, make_info
from tests.integration._transport_helpers import publisher_process, wait_for
from traceml.config import Settings
from traceml.export.histogram import BUCKETS_S
from traceml.export.otlp import OtlpExporter
from traceml.transport.publish.publisher import Publisher


class Receiver(ThreadingHTTPServer):
    """Collects every ExportMetricsServiceRequest posted to /v1/metrics."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[ExportMetricsServiceRequest] = []
        self.paths: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}/v1/metrics"

    def points(self) -> dict[str, list[tuple[dict[str, str], Any]]]:
        """Metric name -> (attributes, data point) of every request received so far."""
        out: dict[str, list[tuple[dict[str, str], Any]]] = {}
        for req in list(self.requests):
            for rm in req.resource_metrics:
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        kind = m.WhichOneof("data")
                        for p in getattr(m, kind).data_points:
                            attrs = {a.key: a.value.string_value for a in p.attributes}
                            out.setdefault(m.name, []).append((attrs, p))
        return out


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        req = ExportMetricsServiceRequest()
        req.ParseFromString(body)
        self.server.paths.append(self.path)
        self.server.requests.append(req)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


@contextmanager
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_otlp_push_carries_the_metrics_and_the_step_histogram(tmp_path: Path) -> None:
    pub = Publisher(make_info("otlp-1", world_size=2), Settings(), tmp_path)
    with receiver() as rx, TxLoop(pub) as loop:
        loop.steps(150)
        loop.wait_published(150)
        exporter = OtlpExporter(rx.url, run="otlp-1", every_s=60, runtime_dir=tmp_path)
        exporter.start()
        try:
            wait_for(lambda: exporter.follower.runs()[0].store.total_steps(0) >= 150, 10)
            assert exporter.flush()
        finally:
            exporter.close()
    assert rx.paths and set(rx.paths) == {"/v1/metrics"}
    points = rx.points()
    attrs, steps = points["traceml.steps"][-1]
    assert attrs == {"run_id": "otlp-1", "script": "train.py", "rank": "0", "host": attrs["host"]}
    assert steps.as_int == 150 or steps.as_double == 150
    shares = {a["phase"]: p.as_double for a, p in points["traceml.phase.share"]}
    assert shares["dataloader"] == 0.3 and shares["backward"] == 0.4
    assert "h2d" not in shares  # not measured: no point, never a 0
    (median,) = {p.as_double for _, p in points["traceml.step.median"]}
    assert median == 0.01
    kinds = {a["kind"] for a, _ in points["traceml.diagnosis.info"]}
    assert kinds == {"INPUT_BOUND"}
    _, hist = points["traceml.step.duration"][-1]
    assert hist.count == 150 and abs(hist.sum - 1.5) < 1e-9
    assert list(hist.explicit_bounds) == list(BUCKETS_S)
    assert hist.bucket_counts[BUCKETS_S.index(0.01)] == 150


@pytest.mark.slow
def test_cli_pushes_until_the_run_ends(runtime_dir: Path) -> None:
    """`traceml export otlp` as a user runs it: pushes while the run goes, exports once more at
    its end and exits 0 by itself."""
    with receiver() as rx:
        with publisher_process(runtime_dir, "otlp-cli", "--backlog", "20", "--rate", "50") as pub:
            exporter = subprocess.Popen(
                traceml_cmd("export", "otlp", "otlp-cli", "--endpoint", rx.url, "--every", "0.5"),
                stderr=subprocess.PIPE,
                text=True,
                env=child_env(),
            )
            wait_for(lambda: "traceml.steps" in rx.points(), 20, "a first push")
            os.kill(pub.pid, signal.SIGTERM)
            assert exporter.wait(20) == 0, exporter.stderr and exporter.stderr.read()
        states = {a["state"]: p.as_double for a, p in rx.points()["traceml.rank.state"][-4:]}
    assert states["finished"] == 1.0 and states["live"] == 0.0
