"""Analysis: fold step records into a RunStore, view them as RunViews, diagnose, summarise, render.

Pure Python over `traceml.records`: this package must never import torch or textual, and never
does I/O except `summary.write_summary` / `summary.load_summary`.
"""
