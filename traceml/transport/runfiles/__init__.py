"""Discovery: the private runtime dir, run and rank files, run ids and the per-rank lock.

How viewers find a run. Written by ranks, read by `ls`, `attach` and the collector.
"""
