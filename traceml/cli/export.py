"""`traceml export prometheus|otlp|wandb|mlflow|tensorboard`: headless subscribers that put a live
run where teams already look.

Each target attaches like `traceml attach` (it only reads the run: stopping or killing it costs
the job nothing) and runs until Ctrl-C, SIGTERM or, for one run, the run's end. The exporter
libraries are imported inside the target's function, so `traceml ls` never pays for them.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from traceml.errors import ConfigError

if TYPE_CHECKING:
    from traceml.export.follower import Follower
    from traceml.export.live import Tracker

DEFAULT_EVERY_S = 10.0
TRACKERS = ("wandb", "mlflow", "tensorboard")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "export",
        help="serve a run's metrics to Prometheus/OpenTelemetry, or log them live to a tracker",
        description="Follow a live run (read-only) and export its metrics.",
    )
    targets = p.add_subparsers(dest="target", metavar="TARGET", required=True)
    _prometheus(targets)
    _otlp(targets)
    for name in TRACKERS:
        _tracker(targets, name)


def _run_args(p: argparse.ArgumentParser, *, optional: bool = True) -> None:
    p.add_argument(
        "run",
        nargs="?" if optional else None,
        metavar="RUN",
        help="run id or unique prefix (see traceml ls); default the newest live run",
    )


def _follow_all(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--all", action="store_true", dest="all", help="follow every live run as they come and go"
    )


def _prometheus(targets: Any) -> None:
    p = targets.add_parser(
        "prometheus",
        help="serve /metrics for Prometheus",
        description="Serve the run's metrics on http://HOST:PORT/metrics (prometheus-client).",
    )
    _run_args(p)
    _follow_all(p)
    p.add_argument("--port", type=int, default=9464, help="port to serve on (default 9464)")
    p.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this host only)"
    )


def _otlp(targets: Any) -> None:
    p = targets.add_parser(
        "otlp",
        help="push metrics to an OpenTelemetry collector (OTLP/HTTP)",
        description="Push the run's metrics over OTLP/HTTP (opentelemetry-sdk).",
    )
    _run_args(p)
    _follow_all(p)
    p.add_argument(
        "--endpoint",
        required=True,
        help="OTLP/HTTP metrics URL, e.g. http://localhost:4318/v1/metrics",
    )
    p.add_argument(
        "--every", type=float, default=DEFAULT_EVERY_S, help="seconds between exports (default 10)"
    )


def _tracker(targets: Any, name: str) -> None:
    p = targets.add_parser(
        name,
        help=f"log windowed step time, phase shares and memory into {name} every few seconds",
        description=f"Log the run's live metrics into {name} every --every seconds.",
    )
    _run_args(p)
    p.add_argument(
        "--every", type=float, default=DEFAULT_EVERY_S, help="seconds between logs (default 10)"
    )
    if name == "wandb":
        p.add_argument("--project", help="W&B project (default: WANDB_PROJECT or 'traceml')")
        p.add_argument("--id", dest="tracker_run", help="W&B run id to resume (the user's run)")
    elif name == "mlflow":
        p.add_argument("--tracking-uri", help="MLflow tracking URI (default: MLFLOW_TRACKING_URI)")
        p.add_argument("--experiment", help="experiment name for a new MLflow run")
        p.add_argument("--mlflow-run", dest="tracker_run", help="MLflow run id to log into")
    else:
        p.add_argument(
            "--logdir", help="event file folder (default: traceml-runs/<run-id>/tensorboard)"
        )


def run(args: argparse.Namespace) -> int:
    """Dispatch to the target (TraceMLError: main prints one line and exits 2)."""
    if getattr(args, "every", 1.0) <= 0:
        raise ConfigError(f"--every must be > 0 seconds, got {args.every}")
    if args.target == "prometheus":
        return _serve_prometheus(args)
    if args.target == "otlp":
        return _push_otlp(args)
    return _log_live(args)


def _wait(follower: Follower, *, until_over: bool) -> int:
    """Block until SIGTERM (exit 0), the follower failing (exit 2) or, with `until_over`, every
    rank of the run finished or died (exit 0). Ctrl-C raises KeyboardInterrupt: main exits 130."""
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(0.5):
            if follower.error is not None:
                raise follower.error
            if until_over and all(run.is_over() for run in follower.runs()):
                return 0
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)


def _serve_prometheus(args: argparse.Namespace) -> int:
    from traceml.export.follower import Follower
    from traceml.export.prometheus import PrometheusServer

    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be 0..65535, got {args.port}")
    follower = Follower(args.run, follow_all=args.all)
    follower.open()
    server = PrometheusServer(follower, host=args.host, port=args.port)
    try:
        server.start()
        follower.start()
        what = "every live run" if args.all else follower.runs()[0].run_id
        print(f"traceml: serving {what} on {server.url}", file=sys.stderr, flush=True)
        return _wait(follower, until_over=False)
    finally:
        server.close()
        follower.close()


def _push_otlp(args: argparse.Namespace) -> int:
    from traceml.export.otlp import OtlpExporter, log_failures_once

    log_failures_once()
    exporter = OtlpExporter(args.endpoint, run=args.run, follow_all=args.all, every_s=args.every)
    exporter.start()
    try:
        print(f"traceml: pushing to {args.endpoint}", file=sys.stderr, flush=True)
        return _wait(exporter.follower, until_over=not args.all)
    finally:
        exporter.close()


def _open_tracker(args: argparse.Namespace, run_id: str) -> Tracker:
    if args.target == "wandb":
        from traceml.export.wandb_tracker import open_wandb

        return open_wandb(run_id, project=args.project, resume_id=args.tracker_run)
    if args.target == "mlflow":
        from traceml.export.mlflow_tracker import open_mlflow

        return open_mlflow(
            run_id,
            tracking_uri=args.tracking_uri,
            experiment=args.experiment,
            mlflow_run=args.tracker_run,
        )
    from traceml.export.tensorboard_tracker import open_tensorboard

    return open_tensorboard(run_id, logdir=args.logdir)


def _log_live(args: argparse.Namespace) -> int:
    from traceml.export.follower import Follower
    from traceml.export.live import LiveLogger

    follower = Follower(args.run)
    follower.open()
    try:
        tracker = _open_tracker(args, follower.runs()[0].run_id)
        logger = LiveLogger(follower, tracker, every_s=args.every)
        logger.start()
        print(f"traceml: logging {follower.runs()[0].run_id} to {args.target}", file=sys.stderr)
        try:
            return _wait(follower, until_over=True)
        finally:
            logger.close()
    finally:
        follower.close()
