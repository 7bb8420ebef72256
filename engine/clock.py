"""Per-step timing stamps and host-synchronization counting for the decode loop.

On CUDA with timing on, each timed step records four CUDA events (draft
start, draft end, verification launched, step end) and counts the host
synchronizations torch.cuda's sync debug mode reports while the step is
enqueued.  On the CPU a host clock stands in for the events.
"""

from __future__ import annotations

import contextlib
import statistics
import time
import warnings

import torch

from .results import RunResult, StepTiming

__all__ = ["HostStamp", "StepClock", "StepStamps", "SyncCount", "count_host_syncs", "replay_us", "wall_seconds"]

SYNC_WARNING = "synchronizing CUDA operation"


class HostStamp:
    """A host clock reading with ``torch.cuda.Event``'s ``record`` / ``elapsed_time`` (ms), for the CPU."""

    def __init__(self):
        self.t = None

    def record(self) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, other: "HostStamp") -> float:
        return (other.t - self.t) * 1e3


def stamp_factory(cuda_events: bool):
    """A maker of timing stamps: CUDA events, or host clock readings."""
    return (lambda: torch.cuda.Event(enable_timing=True)) if cuda_events else HostStamp


def replay_us(replay, repeats: int, inner: int, *, warm: int = 0, cuda: bool = True) -> float:
    """The median time of one ``replay()`` in us: ``repeats`` timings of ``inner`` back-to-back calls each,
    after ``warm`` untimed ones; CUDA events around each timing (``cuda``), else the host clock."""
    stamp = stamp_factory(cuda)
    for _ in range(warm):
        replay()
    times = []
    for _ in range(repeats):
        a, b = stamp(), stamp()
        a.record()
        for _ in range(inner):
            replay()
        b.record()
        if cuda:
            b.synchronize()
        times.append(a.elapsed_time(b) * 1000 / inner)
    return statistics.median(times)


class StepStamps:
    """One step's four stamps: draft start, draft end, verification launched, step end.

    The verification stamp comes before any read-back or host tail, which
    count towards the verify->draft gap.  A disabled set records nothing.
    """

    def __init__(self, make=None):
        self.events = [make() for _ in range(4)] if make is not None else None

    def mark(self, k: int) -> None:
        if self.events:
            self.events[k].record()


class SyncCount:
    n: int = 0


@contextlib.contextmanager
def _sync_debug(active: bool):
    """torch.cuda's sync debug mode set to warn while the block runs (when ``active``)."""
    if not active:
        yield
        return
    debug_mode = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(debug_mode)


@contextlib.contextmanager
def count_host_syncs(active: bool):
    """Count the block's host synchronizations into the yielded ``SyncCount`` (when ``active``).

    Every warning is caught while the block runs; the sync reports are
    counted and dropped, everything else goes on to the caller's filters.
    """
    count = SyncCount()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with _sync_debug(active):
            yield count
    syncs = [w for w in caught if active and SYNC_WARNING in str(w.message)]
    for w in caught:
        if not any(w is x for x in syncs):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    count.n = len(syncs)


class Seconds:
    s: float | None = None


@contextlib.contextmanager
def wall_seconds(device: torch.device):
    """The block's wall time into the yielded ``Seconds``, the device's work before and in it waited for."""
    out = Seconds()
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
    t = time.perf_counter()
    yield out
    if cuda:
        torch.cuda.synchronize(device)
    out.s = time.perf_counter() - t


def median_wall_us(fn, device: torch.device, repeats: int) -> float:
    """The median wall time of ``fn()`` in us over ``repeats`` calls (at least one), each timed by
    ``wall_seconds`` (the device's work waited for), after one untimed call (compiles, the allocator)."""
    fn()
    times = []
    for _ in range(max(1, repeats)):
        with wall_seconds(device) as took:
            fn()
        times.append(took.s)
    return statistics.median(times) * 1e6


class StepClock:
    """The wall clock over the timed steps and, with ``timing``, every timed step's stamps; with ``turnaround``,
    the host's turnaround before each timed step's draft launch (``turnaround``)."""

    def __init__(self, device: torch.device, timing: bool, turnaround: bool = False):
        self.on_cuda = device.type == "cuda"
        self.turnarounds = turnaround  # read the host's turnaround (``turnaround``): a timed run, no profiler
        self.cuda_events = self.on_cuda and timing  # CUDA events and sync counts
        self.timing = timing
        self._make = stamp_factory(self.cuda_events)
        self.t0: float | None = None
        self.stamps: list[StepStamps] = []
        self.sync_counts: list[int | None] = []

    def start(self, timed: bool) -> None:
        """Start the wall clock at the first timed step (after the device finished the untimed ones)."""
        if timed and self.t0 is None:
            if self.on_cuda:
                torch.cuda.synchronize()
            self.t0 = time.perf_counter()

    def step(self, timed: bool) -> StepStamps:
        """This step's stamps, enabled for timed steps when timing."""
        return StepStamps(self._make if self.timing and timed else None)

    def turnaround(self, mode, res: RunResult, timed: bool) -> None:
        """In a timed step of a run that reads it, right before the draft's launch: the host's time since ``mode``
        finished its work after the last verification (``Mode.synced_ns``), into ``res.host_turnaround_us``."""
        t, mode.synced_ns = mode.synced_ns, None
        if self.turnarounds and timed and t is not None:
            res.host_turnaround_us.append(round((time.perf_counter_ns() - t) / 1e3, 3))

    def counts_syncs(self, timed: bool) -> bool:
        return self.cuda_events and timed

    def record(self, stamps: StepStamps, syncs: SyncCount) -> None:
        if stamps.events:
            self.stamps.append(stamps)
            self.sync_counts.append(syncs.n if self.cuda_events else None)

    def finish(self, res: RunResult) -> None:
        """Wait for the device, then fill in ``res``'s elapsed time and step timings."""
        if self.on_cuda:
            torch.cuda.synchronize()
        if self.t0 is not None:
            res.elapsed_s = time.perf_counter() - self.t0
        if not self.stamps:
            return
        events = [s.events for s in self.stamps]
        res.elapsed_s = events[0][0].elapsed_time(events[-1][3]) / 1e3
        for k, (e0, e1, e2, _) in enumerate(events):
            gap = e2.elapsed_time(events[k + 1][0]) * 1e3 if k + 1 < len(events) else float("nan")
            res.timings.append(
                StepTiming(e0.elapsed_time(e1) * 1e3, e1.elapsed_time(e2) * 1e3, gap, self.sync_counts[k])
            )
