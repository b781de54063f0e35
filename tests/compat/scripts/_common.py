"""What every compat script shares: one seed, and the lines the harness compares.

Each script prints `final_loss=<repr of a Python float>` and `params=<sha256>` (every tensor of
the state_dict, byte for byte), so a changed loss or a changed bit of a parameter shows.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

import torch


def seed(value: int = 0) -> None:
    random.seed(value)
    torch.manual_seed(value)


def digest(*things: Any) -> str:
    """sha256 of every tensor of `things` (modules or optimizers: their state_dict; or a dict of
    tensors), in key order, byte for byte."""
    h = hashlib.sha256()
    for thing in things:
        state = thing if isinstance(thing, dict) else thing.state_dict()
        tensors = _flatten(state)
        for key in sorted(tensors):
            t = tensors[key].detach().cpu().contiguous().reshape(-1)
            h.update(key.encode())
            h.update(t.view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _flatten(state: Any, prefix: str = "") -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    items = state.items() if isinstance(state, dict) else enumerate(state)
    for key, value in items:
        name = f"{prefix}{key}"
        if isinstance(value, torch.Tensor):
            out[name] = value
        elif isinstance(value, (dict, list, tuple)):
            out.update(_flatten(value, name + "."))
    return out


def report(loss: Any, *modules: Any) -> None:
    """The two lines the harness compares bare against traced."""
    value = loss.item() if isinstance(loss, torch.Tensor) else loss
    print(f"final_loss={float(value)!r}")
    print(f"params={digest(*modules)}")


def mlp(width: int = 256, depth: int = 3, n_out: int = 1) -> torch.nn.Sequential:
    """A model whose forward and backward dominate a CPU step."""
    layers: list[torch.nn.Module] = [torch.nn.Linear(64, width), torch.nn.ReLU()]
    for _ in range(depth - 1):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, n_out))
