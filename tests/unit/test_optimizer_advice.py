"""Optimizer classes travel with the rank's info and decide OPTIMIZER_BOUND's advice."""

from __future__ import annotations

import pytest

from traceml.analysis.rules_step import LBFGS_ACTION, OPTIMIZER_ACTION, optimizer_action
from traceml.config import parse_skip
from traceml.errors import ConfigError
from traceml.records import RankInfo


@pytest.mark.parametrize(
    ("names", "says", "never"),
    [
        ((), "fused or foreach optimizer", None),
        (("LBFGS",), "history_size", "fused"),
        (("AdamW",), "AdamW(..., fused=True)", None),
        (("RMSprop",), "RMSprop(..., foreach=True)", "fused=True"),
        (("Lion",), "Lion has no fused path in torch.optim", "AdamW"),
        (("Adam", "SGD"), "SGD(..., fused=True)", None),
    ],
)
def test_the_advice_fits_the_optimizer(
    names: tuple[str, ...], says: str, never: str | None
) -> None:
    action = optimizer_action(names)
    assert says in action
    if never is not None:
        assert never not in action


def test_no_optimizer_seen_keeps_the_general_advice() -> None:
    assert optimizer_action(()) == OPTIMIZER_ACTION
    assert optimizer_action(("LBFGS",)) == LBFGS_ACTION


def test_rank_info_carries_optimizers_and_reads_the_older_wire() -> None:
    info = RankInfo(run_id="r", rank=1, optimizers=("Adam", "LBFGS"))
    assert RankInfo.from_wire(info.to_wire()) == info
    older = info.to_wire()[:15]  # a TraceML that did not send the field
    assert RankInfo.from_wire(older).optimizers == ()


@pytest.mark.parametrize(
    ("raw", "skip"),
    [("", frozenset()), ("forward", {"forward"}), (" Comm , h2d ", {"comm", "h2d"})],
)
def test_traceml_skip_names_patches(raw: str, skip: set[str]) -> None:
    assert parse_skip(raw) == skip


def test_traceml_skip_rejects_an_unknown_name() -> None:
    with pytest.raises(ConfigError, match="use any of dataloader, forward"):
        parse_skip("forwards")
