"""Exporters: headless subscribers that put a live run where teams already look (Prometheus,
OpenTelemetry, W&B, MLflow, TensorBoard).

Each one attaches like the viewer does (traceml.transport.subscribe) and folds into a RunStore on
its own thread; none of them writes to a run, runs on a training thread, or imports torch or
textual. The libraries of each target are imported only by the exporter that uses them.
"""
