"""The rank's side: its XPUB + ROUTER sockets, history, snapshots and its push to the collector.

Runs in the rank's beats only (instrument.worker: the training thread between two steps, or the
tx thread, one at a time); nothing here blocks or imports torch.
"""
