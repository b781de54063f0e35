"""The viewer's side: run listing, per-rank links, stitching snapshot and live, liveness, folding.

Used by `ls`, `attach`, the exporters and the job collector; never imports torch.
"""
