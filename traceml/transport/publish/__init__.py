"""The rank's side: its XPUB + ROUTER sockets, history, snapshots and its push to the collector.

Runs in the rank's tx thread only; nothing here blocks or imports torch.
"""
