"""The tx worker: everything a rank does besides timestamps, on a schedule of beats.

A beat drains the bounded buffer of RawSteps, resolves CUDA events with `query()`, folds records
into the RunStore, publishes them, services the sinks and samples the system at 1 Hz; the last
one writes the summary. Nothing here may block the training thread or raise into it.

Who beats: the tx thread, by default. With TRACEML_INLINE=1 (Settings.inline) the training
thread itself does while the loop runs, at the end of the first step that ends after a beat is
due (the step timer calls `TxWorker.beat`); the tx thread then sleeps through those and beats
only when none came (INLINE_GRACE_S late): a loop stalled inside a step, a pause between steps,
the end. The beat's work is the same on either thread (about 1.7 µs of CPU a 0.4 ms step). On
a core both threads share, inline beats saved about 2.6 µs a step (no GIL hand-offs, half the
wake-ups); with a core free for the tx thread they showed no gain (13 µs a step more in one
set of runs, even in another), so they are not the default (docs/performance.md, "Beats on
the training thread"). One lock makes sure one beat runs at a time, and the training thread
never waits for it.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import operator
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from traceml.instrument.busy import BusySpans
from traceml.instrument.cuda import CudaMarker
from traceml.instrument.resolve import NS_PER_MS, HostRecords, host_records, to_record
from traceml.instrument.timer import RawStep
from traceml.probe import warn_once
from traceml.records import RankEnd, RankInfo, StepRecord, SystemSample

TICK_S = 0.25
"""The tx thread wakes this often and folds everything the training thread queued since, in one
go. What training pays for it is the GIL the tx thread holds, and few long holds cost it less
than many short ones: one fold delays the one or two steps it overlaps, so at 4 ticks a second
under 1 % of the steps of any loop faster than 2.5 ms a step see it (at 1 ms steps, 0.4 %) and
the p99 step stays near bare; slower loops fold a few records a tick, well under 1 % of their
step. Folding in 16-record slices with a yield between them (before) delayed several steps a
tick and doubled the p99, and 10 ticks a second touched 1 % of 1 ms steps: exactly the p99.
Step records reach viewers at most this late. Each tick also costs about 0.8 ms whatever it
folds (its code and the store's structures are cold after a sleep): a 0.5 s tick with 1,024-
record slices took the held steps from 6.75 to 5.66 µs a step on a 0.5 ms loop, for a longest
step of 6.9 ms against 4.7, but the whole suite's CI failed twice right after it in a test that
times a hang among 5 ms steps (slow steps beside the hang), cause not found: not kept.
See docs/performance.md."""
QUIET_TICK_S = 0.5
"""The tick while no viewer listens (no subscription to the rank's publisher, no snapshot being
sent, no job collector link) and the loop queues under a FILLING_PARTS-th of the buffer a
second (slower than 0.24 ms a step with the default buffer): every tick services the sinks
(requests, subscriptions, heartbeat, the rank file), so a viewer that attaches is answered
within half a second and every tick folds from then on. Each wake-up of this thread takes the
GIL from the training thread once or twice and may delay a step by its work: at 1 ms a step,
the five wake-ups a second of 0.25 s ticks plus a sample of its own (two of them only looking
whether the queue was filling) put about 0.7 % of the steps behind it, near the p99. Now two:
the fold's, and the sample's with the service between folds (QUIET_FOLD_S)."""
QUIET_FOLD_S = 1.0
"""While nobody listens, a tick takes, folds and publishes the steps queued since only once its
ticks since the last fold add up to this (or it finds the queue filling): nobody waits for them,
and most of a tick's fixed cost (about 0.8 ms of GIL, above) is then paid once a second. At
QUIET_TICK_S that is every other tick, and the tick between takes the system sample, so the
once-a-second work needs no wake-up of its own. `traceml.summary()` asks for a fold of its own
(flush)."""
QUIET_SERVICE_S = 0.5
"""While nobody listens, the sinks are serviced once the ticks since the last service add up to
this: every QUIET_TICK_S tick, every other 0.25 s tick of a fast loop. A service with nothing
to answer still costs about 0.1 ms of the GIL (its code is cold)."""
FILLING_PARTS = 4
"""The queue is filling once it holds this fraction of what it can (a quarter): any tick then
folds. A loop queueing that much a second keeps the 0.25 s tick even while nobody listens, so
a quiet second never fills the queue, and a fold never takes more RawSteps than the C timer's
pool keeps (a quarter of the default buffer)."""
_SLACK_S = 1e-6
"""Sums of tick periods are compared with this much slack (floats)."""
SERVE_TICK_S = 0.02
"""The tick while an attach snapshot is being sent (in parts, 2 ms of sending per tick), so a
viewer gets a long history in a fraction of a second."""
SLICE_RECORDS = 512
YIELD_S = 0.0001
"""A tick folds at most SLICE_RECORDS records in one GIL hold (about 5 ms inside a training loop,
at ~10 µs a record there), with a YIELD_S sleep between slices: a 0.4 ms loop's tick (~600
steps) is two holds, a 1 ms loop's one, and a loop of tens of µs a step, or a tick after a stall
of the tx thread, never makes training wait on one fold of tens of ms. Yielding with sleep(0)
is not enough: the tx thread re-takes the GIL before the woken training thread can."""
_MARKS = operator.itemgetter(6)
"""RawStep.marks, a CUDA step's (label, event) boundaries: None (or empty, which resolves to
the host clock all the same) on a host step. At C speed: a generator over the batch was a
Python resume per step."""
SYSTEM_EVERY_S = 1.0
PROGRESS_EVERY_S = 5.0
PRIMARY_EVERY_S = 5.0
"""The primary finding (heartbeats, rank file, `traceml ls`) is re-diagnosed this often while a
viewer listens: a diagnosis of the live window takes 1.5-7 ms of the GIL, too much to pay every
second."""
PRIMARY_QUIET_S = 15.0
"""The same while nobody listens: only `traceml ls` reads it then (from the rank file), and a
listing may show a finding this old. Within a second of a viewer's attaching, the heartbeats
carry one at most PRIMARY_EVERY_S old again."""
CUDA_GIVE_UP_S = 30.0
"""A CUDA step whose events are still pending this long is published on the host clock."""
INLINE_GRACE_S = 1.5
"""The tx thread beats only once the training thread has run no beat for this long (or a beat
is due later than that): while steps end it wakes about once a second to look, not at every
beat, each wake-up taking the GIL. A rank stalled inside a step still services its sinks
(heartbeats, with the phase it is stuck in) this late at most, within a viewer's DEAD_AFTER_S
(3 s)."""
RETRY_NS = 1_000_000
"""A step end that finds the tx thread beating asks again this much later."""
NEVER_NS = 1 << 62
"""The due time that never comes: the training thread stops beating."""


class Sink(Protocol):
    """Where the beats send what they fold: the live transport implements this. Optional
    attributes read with getattr: `watched`, `busy`, and `inline` (False: the beats stay on the
    tx thread while it is)."""

    def open(self) -> None: ...
    def send_steps(self, records: list[StepRecord]) -> None: ...
    def send_system(self, sample: SystemSample) -> None: ...
    def service(
        self, now: float, *, last_step: int, dropped: int, primary: str | None, phase: str | None
    ) -> None: ...
    def close(self, end: RankEnd, summary_path: Any) -> None: ...


@dataclass
class WorkerParts:
    """What the tx thread is given; all of it is touched by the tx thread alone once started."""

    info: RankInfo
    raw: deque[RawStep]
    store: Any
    """analysis.store.RunStore."""
    page_mb: float
    wall_offset_ns: int
    sampler: Any = None
    sinks: list[Sink] = field(default_factory=list)
    """Where records go besides the store: the live publisher, the job link (multi-rank)."""
    cuda: CudaMarker | None = None
    progress: Callable[[], str] | None = None
    finish: Callable[[RankEnd], Any] | None = None
    """Called on the tx thread at the very end; returns the summary path (or None)."""
    primary: Callable[[], str | None] = field(default=lambda: None)
    phase: Callable[[], str] | None = None
    """The phase the training thread is in now (for heartbeats: where a stalled rank is)."""
    optimizers: Callable[[], tuple[str, ...]] | None = None
    """Class names of the optimizers the training thread has stepped (auto mode), else None."""
    host_records: HostRecords = host_records
    """RawSteps to StepRecords without CUDA marks: resolve.host_records or its C twin."""
    pull: Callable[[], None] | None = None
    """Called at each tick before anything else: fills `raw` from where the steps are (the
    beats process's ring), or None when the training thread queues them there itself."""
    own_gil: bool = True
    """The beats share the training thread's GIL (a thread of the training process): a step
    that overlapped one waited for it (`held_ms`). False in the beats process."""
    recycle: Callable[[list[RawStep]], None] | None = None
    """Hands converted RawSteps back to the C timer for reuse (its `recycle`), or None. A step
    then allocates no object the garbage collector counts on the training thread, where one a
    step, freed only here, brought a gen-0 collection there every tick."""


def next_beat(due: float, every: float, now: float) -> float:
    """The beat after `due` on its grid of `every` seconds, the first after `now` when beats
    were missed: a fixed rate keeps the ticks and the samples half a tick apart for good, where
    `now + every` would let each drift by its own wake-up delays until they met."""
    due += every
    if due <= now:
        due += (math.floor((now - due) / every) + 1) * every
    return due


def _sink_name(sink: Sink) -> str:
    return "job collector link" if type(sink).__name__ == "JobLink" else "live view"


class TxWorker(threading.Thread):
    """Turns raw steps into records and sends them on, in beats: on this daemon thread, or with
    TRACEML_INLINE=1 on the training thread through `beat` while the loop runs (the module's
    docstring)."""

    def __init__(self, parts: WorkerParts) -> None:
        super().__init__(name="traceml-tx", daemon=True)
        self.p = parts
        self._stop_evt = threading.Event()
        self._wake = threading.Event()
        """Set to cut the wait short: by stop(), and by flush() for a tick now."""
        self._ticked = threading.Condition()
        self._asked = 0
        """flush() requests so far, numbered (under _ticked)."""
        self._served = 0
        """The last request a finished tick had seen when it began: its steps are folded."""
        self._end: RankEnd | None = None
        self._pending: deque[tuple[RawStep, float]] = deque()
        self._next_step = 0
        self.dropped = 0
        self.last_step = -1
        self.summary_path: Any = None
        self.done = threading.Event()
        self._primary: str | None = None
        """Kind of the current primary finding, refreshed every PRIMARY_EVERY_S."""
        self._primary_at = -PRIMARY_QUIET_S
        self.busy = BusySpans()
        """When this thread ran Python; steps overlapping it carry the overlap (held_ms)."""
        self._busy_from = -1
        """perf_counter_ns at which the current busy span began; -1 while waiting."""
        self._period = TICK_S
        """The period the current tick was scheduled with."""
        self._unfolded_s = 0.0
        """The periods of the ticks since the last fold (QUIET_FOLD_S)."""
        self._unserviced_s = 0.0
        """The periods of the ticks since the last service (QUIET_SERVICE_S)."""
        self._drained_at = time.monotonic()
        self._fast = False
        """Whether the last fold took steps at a FILLING_PARTS-th of the buffer a second or
        more: the 0.25 s tick then, watched or not."""
        self._sampled_at = -math.inf
        """time.monotonic() of the last system sample."""
        self._lock = threading.Lock()
        """Held through a beat, on whichever thread runs it: one beat at a time."""
        self._ready = False
        """Set once this thread has opened the sinks and laid out the schedule: beats may run."""
        self._next_tick = self._next_sys = self._next_progress = 0.0
        """When the next tick, system sample and progress line are due (time.monotonic())."""
        self._beater: int | None = None
        """threading.get_ident() of the training thread while it runs a beat, else None."""
        self._inline_at = -math.inf
        """time.monotonic() at which the training thread last began a beat."""
        self._stopper: int | None = None
        """threading.get_ident() of the thread that called stop()."""
        self._pid = os.getpid()
        self.cpu_s = 0.0
        """CPU seconds of the beats so far, on either thread (the system samples' own CPU)."""
        self._cpu_from = 0.0
        """time.thread_time() at the current beat's start."""

    def stop(self, end: RankEnd, timeout: float) -> bool:
        """Ask for the final drain, summary and close; True if it finished within `timeout`."""
        self._end = end
        self._stopper = threading.get_ident()
        self._stop_evt.set()
        self._wake.set()
        self.done.wait(timeout)
        return self.done.is_set()

    def flush(self, timeout: float) -> bool:
        """Fold what the training thread queued so far, now, and wait (at most `timeout`) until
        it is in the store; True if it is. For `traceml.summary()`, which would otherwise miss
        up to a tick of steps. Never call it from this thread (it would wait for itself)."""
        if self.done.is_set() or not self.is_alive() or threading.current_thread() is self:
            return False
        with self._ticked:
            self._asked += 1
            mine = self._asked
            self._wake.set()
            # A tick already under way may have drained the buffer before this request's steps
            # were queued: only one that began after the request serves it.
            return (
                self._ticked.wait_for(lambda: self._served >= mine or self.done.is_set(), timeout)
                and self._served >= mine
            )

    def run(self) -> None:
        try:
            self._open_sink()
            start = time.monotonic()
            self._period = self._tick_s()
            self._next_tick = start + self._period
            # Half a tick after the ticks, so the once-a-second work (system sample, heartbeat
            # finding, progress line) has a beat of its own, not a fold's: each delays a step of
            # its own instead of one step paying both (5-6 ms at a 0.4 ms step). Only a beat
            # late by half a tick runs them back to back.
            # While nobody listens, the sample rides instead on the tick between two folds.
            self._next_sys = self._next_progress = start + TICK_S / 2
            if hasattr(self.p.sampler, "own_cpu"):  # a SystemSampler
                self.p.sampler.own_cpu = self.cpu_so_far
            self._ready = True
            while True:
                self._wake.wait(max(0.0, self._wake_at() - time.monotonic()))
                self._wake.clear()
                if self._stop_evt.is_set():
                    break
                with self._lock:
                    now = time.monotonic()
                    if self._asked > self._served or now >= self._wake_at():
                        self._beat(now)
            locked = self._end_lock()
            try:
                self._finish()
            finally:
                if locked:
                    self._lock.release()
        except Exception as e:  # noqa: BLE001 - the tx thread steps aside, training goes on
            warn_once("tx thread", f"background thread stopped ({type(e).__name__}: {e})")
        finally:
            self.done.set()
            with self._ticked:
                self._ticked.notify_all()  # a flush() waiting on a tick that will not come

    def _due(self) -> float:
        """When the next beat is due: the next tick, or the next sample if it comes first (while
        nobody listens the sample rides on a tick)."""
        if self._quiet_cadence():
            return self._next_tick
        return min(self._next_tick, self._next_sys)

    def _wake_at(self) -> float:
        """When this thread beats: when the beat is due, but no sooner than INLINE_GRACE_S
        after the training thread's last beat (except while a snapshot is sent: those 20 ms
        ticks stay here)."""
        due = self._due()
        if self._period == SERVE_TICK_S:
            return due
        return max(due, self._inline_at + INLINE_GRACE_S)

    def _end_lock(self) -> bool:
        """Take the beat lock for the final beat; False when it cannot be had because the
        training thread holds it in a beat that a signal handler interrupted to call stop() (a
        SIGTERM's shutdown), which waits for this thread: that beat resumes only after, so the
        end goes on without the lock rather than lose the summary."""
        while not self._lock.acquire(timeout=0.05):
            beater = self._beater
            if beater is not None and beater == self._stopper:
                return False
        return True

    def beat(self, t_ns: int) -> int:
        """The due beat, run on the training thread at the end of a step (the step timer calls
        it once its clock reads `t_ns` at or after the due time it last returned); returns the
        next due time on that clock. Skipped while the tx thread beats, before it has started,
        while it sends a snapshot, while a sink says no (`inline`) and once it stopped; never
        raises an Exception into the loop: one that a beat raises turns inline beats off, and
        the tx thread beats from then on."""
        now = time.monotonic()
        if not self._ready or self._period == SERVE_TICK_S or not self._inline_ok():
            return t_ns + round(TICK_S * 1e9)
        if self._stop_evt.is_set() or self.done.is_set() or os.getpid() != self._pid:
            return NEVER_NS
        if not self._lock.acquire(blocking=False):
            return t_ns + RETRY_NS
        try:
            self._beater = threading.get_ident()
            self._inline_at = now
            # Nothing may be due: the first step's end, or the tx thread beat meanwhile.
            if now >= self._due() or self._asked > self._served:
                self._beat(now)
            due = self._due()
        except Exception as e:  # noqa: BLE001 - the tx thread takes the beats over
            if not self.done.is_set():  # else a stop() that interrupted it closed the sinks
                warn_once("inline beat", f"beats moved to the background ({type(e).__name__}: {e})")
            return NEVER_NS
        finally:
            self._beater = None
            self._lock.release()
        return t_ns + max(0, round((due - now) * 1e9))

    def _inline_ok(self) -> bool:
        """Whether every sink lets the beats run on the training thread (the job link does not
        while this process collects the job itself)."""
        return all(getattr(sink, "inline", True) for sink in self.p.sinks)

    def cpu_so_far(self) -> float:
        """CPU seconds of the beats so far, the current one included: what the system samples
        report as TraceML's own CPU. Called inside a beat."""
        return self.cpu_s + time.thread_time() - self._cpu_from

    def _beat(self, now: float) -> None:
        """One beat: the tick if due (or a flush asked), else the system sample if due; the
        caller holds the lock."""
        self._cpu_from = time.thread_time()
        self._busy_from = time.perf_counter_ns()
        quiet = self._quiet_cadence()
        sample = False
        if now >= self._next_tick or self._asked > self._served:
            with self._ticked:
                serving = self._asked
            folded = self._tick(final=False, asked=serving > self._served)
            if now >= self._next_tick:
                self._period = self._tick_s()
                self._next_tick = next_beat(self._next_tick, self._period, now)
            with self._ticked:
                self._served = serving
                self._ticked.notify_all()
            # A quiet second's sample: at least 0.75 s after the last, so the tick between two
            # folds takes it once a second.
            due = self._sampled_at + SYSTEM_EVERY_S - QUIET_TICK_S / 2
            sample = quiet and not folded and now >= due
        elif now >= self._next_sys:
            sample = True
        if sample:
            self._next_sys = next_beat(self._next_sys, SYSTEM_EVERY_S, now)
            self._sampled_at = now
            self._sample()
            if self.p.progress is not None and now >= self._next_progress:
                self._next_progress = next_beat(self._next_progress, PROGRESS_EVERY_S, now)
                self._print_progress()
        self._busy_end()
        self.cpu_s += time.thread_time() - self._cpu_from

    def _tick_s(self) -> float:
        if any(getattr(sink, "busy", False) for sink in self.p.sinks):
            return SERVE_TICK_S
        return QUIET_TICK_S if self._quiet_cadence() else TICK_S

    def _quiet_cadence(self) -> bool:
        """Whether nobody listens and the loop is slow enough for QUIET_TICK_S."""
        return not self._fast and not self._watched()

    def _watched(self) -> bool:
        """Whether someone waits for the records (a sink that cannot say, the job collector
        link, is taken to: multi-rank jobs fold every tick)."""
        return any(getattr(sink, "watched", True) for sink in self.p.sinks)

    def _filling(self) -> bool:
        """Whether the queue holds a FILLING_PARTS-th of what it can: a loop that fast folds
        every tick, so a quiet second never fills it (steps beyond it are dropped)."""
        raw = self.p.raw
        return raw.maxlen is not None and len(raw) * FILLING_PARTS >= raw.maxlen

    def _open_sink(self) -> None:
        opened: list[Sink] = []
        for sink in self.p.sinks:
            try:
                sink.open()
            except Exception as e:  # noqa: BLE001 - a sink that cannot open is left out
                warn_once(f"sink {type(sink).__name__}", f"{_sink_name(sink)} disabled: {e}")
                continue
            opened.append(sink)
        self.p.sinks = opened

    def _tick(self, final: bool, asked: bool = False) -> bool:
        """Take, fold and publish the steps queued so far, then service the sinks; True when it
        folded. While nobody listens, a tick folds once a QUIET_FOLD_S of ticks (or when a
        flush `asked`, or when it finds the queue filling) and services once a QUIET_SERVICE_S;
        a listener that arrives in a tick's service is sent the queued steps at once."""
        if self.p.pull is not None:
            self.p.pull()
        self._unfolded_s += self._period
        self._unserviced_s += self._period
        due = self._unfolded_s >= QUIET_FOLD_S - _SLACK_S or self._filling()
        if final or asked or due or self._watched():
            self._drain(final)
            self._service()
            return True
        if self._unserviced_s < QUIET_SERVICE_S - _SLACK_S:
            return False  # nobody to answer: the next tick services
        self._service()
        if self._watched():
            self._drain(final)
            return True
        return False

    def _drain(self, final: bool) -> None:
        """Take, fold and publish the steps queued so far, a slice at a time."""
        self._unfolded_s = 0.0
        raw = self.p.raw
        left = len(raw)  # steps queued meanwhile wait for the next tick: service comes first
        now = time.monotonic()
        if raw.maxlen is not None and now > self._drained_at:
            self._fast = left * FILLING_PARTS >= raw.maxlen * (now - self._drained_at)
        self._drained_at = now
        folded = False
        while True:
            batch = list(map(deque.popleft, itertools.repeat(raw, min(left, SLICE_RECORDS))))
            left -= len(batch)
            # A slice at a time from the buffer, so a backlog never lives twice (as RawSteps and
            # as records) in the rank's memory; CUDA steps resolved late may make a slice longer.
            records = self._take(batch, final)
            if self.p.recycle is not None:
                self.p.recycle(batch)  # those still pending (CUDA) are kept as they are
            del batch
            for lo in range(0, len(records), SLICE_RECORDS):
                # Between slices the tx thread hands the GIL back; the training thread, beating
                # itself, has nobody to hand it to.
                if folded and not final and self._beater is None:
                    self._busy_end()
                    time.sleep(YIELD_S)
                    self._busy_from = time.perf_counter_ns()
                self._fold(records[lo : lo + SLICE_RECORDS])
                folded = True
            if left <= 0:
                break

    def _service(self) -> None:
        self._unserviced_s = 0.0
        now = time.time()
        phase = self.p.phase() if self.p.phase is not None else None
        for sink in self.p.sinks:
            sink.service(
                now,
                last_step=self.last_step,
                dropped=self.dropped,
                primary=self._primary,
                phase=phase,
            )

    def _busy_end(self) -> None:
        if self._busy_from >= 0:
            self.busy.add(self._busy_from, time.perf_counter_ns())
            self._busy_from = -1

    def _held(self, raws: list[RawStep], records: list[StepRecord]) -> list[StepRecord]:
        """`records` of `raws` (one each, same order), with the overlap of this thread's busy
        spans on the few steps that had one."""
        if not self.p.own_gil:
            return records
        for i, ns in self.busy.overlaps(raws).items():
            records[i] = records[i]._replace(held_ms=ns / NS_PER_MS)
        return records

    def _fold(self, records: list[StepRecord]) -> None:
        """One slice of records into the store and the sinks."""
        self.last_step = records[-1].step
        self.p.store.add_steps(records)
        for sink in self.p.sinks:
            sink.send_steps(records)

    def _take(self, batch: list[RawStep], final: bool) -> list[StepRecord]:
        """Records of the raw steps taken from the buffer (and of earlier CUDA steps that have
        resolved since); steps missing between them count as dropped."""
        if not batch:
            return self._resolve(final) if self._pending else []
        first, last = batch[0].step, batch[-1].step
        if first == self._next_step and last - first == len(batch) - 1:
            self._next_step = last + 1  # the usual tick: consecutive steps, none dropped
        else:
            for item in batch:
                if item.step > self._next_step:
                    self.dropped += item.step - self._next_step
                self._next_step = item.step + 1
        if not self._pending and not any(map(_MARKS, batch)):
            info = self.p.info
            records = self.p.host_records(batch, info.rank, self.p.wall_offset_ns, self.p.page_mb)
            return self._held(batch, records)
        now = time.monotonic()
        self._pending.extend((item, now) for item in batch)
        return self._resolve(final)

    def _resolve(self, final: bool) -> list[StepRecord]:
        out: list[StepRecord] = []
        raws: list[RawStep] = []
        now = time.monotonic()
        while self._pending:
            raw, since = self._pending[0]
            phases = None
            if raw.marks is not None and len(raw.marks) > 1 and self.p.cuda is not None:
                phases = self.p.cuda.try_resolve(raw.marks)
                if phases is None and not final and now - since < CUDA_GIVE_UP_S:
                    break
            self._pending.popleft()
            raws.append(raw)
            out.append(self._record(raw, phases))
        return self._held(raws, out)

    def _record(self, raw: RawStep, phases: list[float] | None) -> StepRecord:
        return to_record(raw, self.p.info.rank, self.p.wall_offset_ns, self.p.page_mb, phases)

    def _refresh_info(self) -> None:
        """Send the rank's info again once a new optimizer class was stepped (findings name it)."""
        if self.p.optimizers is None:
            return
        names = self.p.optimizers()
        if names == self.p.info.optimizers:
            return
        self.p.info = info = dataclasses.replace(self.p.info, optimizers=names)
        self.p.store.add_info(info)
        for sink in self.p.sinks:
            send_info = getattr(sink, "send_info", None)
            if send_info is not None:
                send_info(info)

    def _sample(self) -> None:
        self._refresh_info()
        now = time.monotonic()
        every = PRIMARY_EVERY_S if self._watched() else PRIMARY_QUIET_S
        if self.last_step >= 0 and now - self._primary_at >= every:
            self._primary_at = now
            self._primary = self.p.primary()
        if self.p.sampler is None:
            return
        sample = self.p.sampler.sample()
        self.p.store.add_system(sample)
        for sink in self.p.sinks:
            sink.send_system(sample)

    def _print_progress(self) -> None:
        if self.p.progress is None or self.last_step < 0:
            return
        try:
            text = self.p.progress()
            if text:
                print(text, file=sys.stderr, flush=True)
        except Exception as e:  # noqa: BLE001
            warn_once("progress", f"progress line failed ({e})")

    def _finish(self) -> None:
        self._tick(final=True)
        self._refresh_info()
        end = self._end or RankEnd(self.p.info.rank, "ok", self.last_step + 1, time.time())
        end = RankEnd(end.rank, end.exit, self.last_step + 1, end.t, end.error)
        self.p.store.add_end(end)
        self.p.store.set_dropped(self.p.info.rank, self.dropped)
        for sink in self.p.sinks:
            settle = getattr(sink, "settle", None)
            if settle is not None:
                settle(end)
            # The job collector process wrote the whole job's summary (and said so).
            self.summary_path = getattr(sink, "job_summary", None) or self.summary_path
        if self.p.finish is not None and self.summary_path is None:
            try:
                self.summary_path = self.p.finish(end)
            except Exception as e:  # noqa: BLE001 - the sinks below must close all the same
                warn_once("summary", f"no summary ({type(e).__name__}: {e})")
        for sink in self.p.sinks:
            sink.close(end, self.summary_path)
        if self.p.sampler is not None:
            self.p.sampler.close()
