"""Viewers for the fault tests, as real processes: one attached viewer, or many that churn.

    python viewer.py RUN_ID                  # one viewer: `attached`, `seen N` lines, `end N`
    python viewer.py RUN_ID --churn 20       # 20 viewers attach, see a step, detach; repeat

With TRACEML_RUNTIME_DIR set. A single viewer prints `attached` at its first step record,
`seen <records>` about every 0.2 s and `end <records> gaps <gap events>` when the run ends.
Churning viewers print `round <i>` after every round in which all of them saw a step, and
`rounds <n>` when the run has ended (or `stuck <i>` and exit 1 when a round found a viewer that
saw nothing for 20 s).
"""

from __future__ import annotations

import argparse
import sys
import time

from traceml.errors import RunNotFoundError
from traceml.transport.subscribe.runs import RunEntry, resolve_run
from traceml.transport.subscribe.subscriber import Subscriber
from traceml.transport.wire.events import EndEvent, GapEvent, StepsEvent


def find(run_id: str) -> RunEntry:
    """The run, once its rank file is there (the viewer may start before the job binds)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            run = resolve_run(run_id)
            if run.ranks:
                return run
        except RunNotFoundError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def watch(run_id: str) -> int:
    seen, gaps, ended, next_line = 0, 0, False, 0.0
    with Subscriber(find(run_id)) as sub:
        while not ended:
            for event in sub.poll(100):
                if isinstance(event, StepsEvent):
                    if seen == 0:
                        print("attached", flush=True)
                    seen += len(event.records)
                gaps += isinstance(event, GapEvent)
                ended = ended or isinstance(event, EndEvent)
            if time.monotonic() >= next_line:
                next_line = time.monotonic() + 0.2
                print(f"seen {seen}", flush=True)
    print(f"end {seen} gaps {gaps}", flush=True)
    return 0


def churn_round(run_id: str, viewers: int) -> tuple[bool, bool]:
    """(every viewer saw a step, the run has ended)."""
    run = find(run_id)
    subs = [Subscriber(run) for _ in range(viewers)]
    got, ended = [False] * viewers, False
    deadline = time.monotonic() + 20
    try:
        while not all(got) and not ended and time.monotonic() < deadline:
            for i, sub in enumerate(subs):
                for event in sub.poll(0 if got[i] else 5):
                    got[i] = got[i] or isinstance(event, StepsEvent)
                    ended = ended or isinstance(event, EndEvent)
    finally:
        for sub in subs:
            sub.close()
    return all(got) or ended, ended


def churn(run_id: str, viewers: int) -> int:
    rounds = 0
    while True:
        ok, ended = churn_round(run_id, viewers)
        if ended:
            print(f"rounds {rounds}", flush=True)
            return 0
        if not ok:
            print(f"stuck {rounds}", flush=True)
            return 1
        rounds += 1
        print(f"round {rounds}", flush=True)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("run_id")
    p.add_argument("--churn", type=int, default=0, metavar="N")
    args = p.parse_args()
    return churn(args.run_id, args.churn) if args.churn else watch(args.run_id)


if __name__ == "__main__":
    sys.exit(main())
