"""A GAN step (mirrors the DCGAN example's loop shape): G and D, two optimizers, trace_step(D).

Both models' forwards are model compute, whichever one `trace_step` names.
"""

import _common
import torch

import traceml

_common.seed()
g, d = _common.mlp(width=384, n_out=64), _common.mlp(width=384)
opt_g = torch.optim.Adam(g.parameters(), lr=2e-4, betas=(0.5, 0.999))
opt_d = torch.optim.Adam(d.parameters(), lr=2e-4, betas=(0.5, 0.999))
bce = torch.nn.BCEWithLogitsLoss()
real_label, fake_label = torch.ones(64, 1), torch.zeros(64, 1)
for _ in range(60):
    real, noise = torch.randn(64, 64), torch.randn(64, 64)
    with traceml.trace_step(d):
        fake = g(noise)
        opt_d.zero_grad()
        loss_d = bce(d(real), real_label) + bce(d(fake.detach()), fake_label)
        loss_d.backward()
        opt_d.step()
        opt_g.zero_grad()
        loss_g = bce(d(fake), real_label)
        loss_g.backward()
        opt_g.step()
_common.report(loss_g, g, d, opt_g, opt_d)
