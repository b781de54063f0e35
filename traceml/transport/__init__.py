"""Live transport of one run: ZeroMQ publishing in each rank's tx thread, run files, attach.

Submodules are imported by what needs them; importing this package loads nothing heavy and never
imports torch or textual.
"""
