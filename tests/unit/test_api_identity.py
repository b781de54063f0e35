"""Who keeps the run identity handed down in the environment: the first process of each rank;
a descendant of the same rank with the same identity starts a run of its own."""

from __future__ import annotations

import pytest

from traceml.api import OWNER_ENV, _claim_identity

HANDED = {"TRACEML_RUN_ID": "train-1", "TRACEML_SUMMARY": "/out/s.json", "TRACEML_LAUNCHER": "1"}
OWNER_PID = 100


def inherited(**changes: str) -> dict[str, str]:
    """What a process started by the owner sees: the owner's environment, plus `changes`."""
    env = dict(HANDED)
    _claim_identity(env, OWNER_PID)
    env.update(changes)
    return env


def identity(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k != OWNER_ENV}


@pytest.mark.parametrize(
    ("pid", "changes", "keeps"),
    [
        (OWNER_PID, {}, True),  # the owner itself, calling init again
        (200, {"RANK": "1"}, True),  # another rank of the same job
        (200, {"TRACEML_RUN_ID": "other-2"}, True),  # a nested `traceml run`: a new id
        (200, {"TRACEML_SUMMARY": "/elsewhere.json"}, True),  # a new summary path
        (200, {}, False),  # the same rank, the same identity: a stranger
    ],
)
def test_who_keeps_the_identity(pid: int, changes: dict[str, str], keeps: bool) -> None:
    env = inherited(**changes)
    before = identity(env)
    _claim_identity(env, pid)
    assert identity(env) == (before if keeps else {})
    assert env[OWNER_ENV].startswith(f"{pid}:")


def test_without_an_owner_the_identity_is_kept_and_claimed() -> None:
    env = dict(HANDED)
    _claim_identity(env, 7)
    assert identity(env) == HANDED
    assert env[OWNER_ENV].startswith("7:0:")


def test_a_strangers_own_children_are_strangers_to_it() -> None:
    env = inherited()
    _claim_identity(env, 200)
    env["TRACEML_SUMMARY"] = "/set/by/the/stranger.json"
    _claim_identity(env, 200)
    child = dict(env)
    _claim_identity(child, 300)
    assert identity(child) == {}
