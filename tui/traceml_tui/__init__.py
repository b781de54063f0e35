"""traceml_tui: the Textual live view of a TraceML run (`traceml attach`, `traceml run`).

It reads runs through the transport's subscriber and draws frozen snapshots; it never imports torch
nor `traceml.instrument`, and never writes to a run (the viewer only reads).
"""
