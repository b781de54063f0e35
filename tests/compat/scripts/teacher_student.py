"""Distillation (teacher in eval under no_grad, student trained) and an RL-style actor/critic
pair with two optimizers: every model's forward inside the step is forward time."""

import sys

import _common
import torch

import traceml

_common.seed()
if sys.argv[1] == "distill":
    teacher, student = _common.mlp(width=512), _common.mlp(width=256)
    teacher.eval()
    opt = torch.optim.SGD(student.parameters(), lr=0.01)
    for _ in range(50):
        x = torch.randn(64, 64)
        with traceml.trace_step(student):
            with torch.no_grad():
                target = teacher(x)
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(student(x), target)
            loss.backward()
            opt.step()
    _common.report(loss, student)
else:
    actor, critic = _common.mlp(width=768, n_out=4), _common.mlp(width=768)
    opt_a = torch.optim.Adam(actor.parameters(), lr=1e-3)
    opt_c = torch.optim.Adam(critic.parameters(), lr=1e-3)
    for _ in range(50):
        state, reward = torch.randn(128, 64), torch.randn(128, 1)
        with traceml.trace_step(actor):
            dist = torch.distributions.Categorical(logits=actor(state))
            action = dist.sample()
            value = critic(state)
            advantage = (reward - value).detach()
            loss_a = -(dist.log_prob(action) * advantage.squeeze(1)).mean()
            loss_c = torch.nn.functional.mse_loss(value, reward)
            opt_a.zero_grad()
            opt_c.zero_grad()
            (loss_a + loss_c).backward()
            opt_a.step()
            opt_c.step()
    _common.report(loss_c, actor, critic)
