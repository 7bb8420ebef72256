"""Profiled boundaries at which the device waited for the host's launch, and the medians without them.

Under ``torch.profiler`` every CUDA API call costs the host many times what it costs
without the profiler (CUPTI), and a graph launch submits its nodes while its call runs.
After the profiler starts, the host may trail the device for a few steps; a
kernel-level boundary of such a step measures how long the device waited for the host
to submit work, not the boundary. A gap from ``lo`` to the record ``after`` is
*host-bound* when:

* ``after`` is not the first device record of its launch (the gap lies inside one
  graph replay) and that launch's call had not returned at ``lo``: the device had run
  what was submitted and waited for the rest;
* or ``after`` is its launch's first record and the launch's call began after ``lo``.

``summarize`` takes each figure's median over the steps whose gap is not host-bound,
and over every step where all are (a mode that synchronizes with the host at a boundary
waits for the host there by design: its figure stays what the steps measured). It counts
the steps left out per figure in ``host_bound_steps``. Seen on an H100 at d53c007, the
depth-3 four-mode sweep: specgen's first five profiled steps at B = 1 read a
draft->verify gap of 205-885 us, the last three 4.4-5.3 us, as every step of the
same commit's one-mode sweep (5.2-5.4 us).
"""

from __future__ import annotations

from . import kernel_timeline as kt
from .trace_records import DeviceRecord, StepKernels

__all__ = ["launch_calls", "first_records", "host_bound", "mark", "summarize", "AFTER_DRAFT", "AFTER_VERIFY"]

AFTER_DRAFT = ("kernel_draft_to_verify_us",)  # the figures of the gap before the forward
AFTER_VERIFY = ("kernel_verify_to_draft_us", "projection_us", "kernel_post_verify_us", "post_verify_idle_us")


def launch_calls(events: list[dict]) -> dict[int, tuple[float, float]]:
    """Each launch call's correlation id -> the call's start and end on the host (us)."""
    out = {}
    for e in events:
        if e.get("cat") in kt.LAUNCH_CATS:
            corr = (e.get("args") or {}).get("correlation")
            if corr is not None:
                ts = float(e["ts"])
                out[corr] = (ts, ts + float(e.get("dur", 0.0)))
    return out


def first_records(steps: dict[int, StepKernels]) -> dict[int, float]:
    """Each correlation id -> the start of the first device record it issued, over every step."""
    out: dict[int, float] = {}
    for s in steps.values():
        for r in s.draft + s.verify:
            if r.correlation is not None:
                out[r.correlation] = min(r.start, out.get(r.correlation, r.start))
    return out


def host_bound(after: DeviceRecord, lo: float, calls: dict, first: dict) -> bool:
    """Whether the gap from ``lo`` to ``after`` is host-bound (see the module docstring); False where the trace
    holds no launch call for ``after``."""
    call = calls.get(after.correlation)
    if call is None:
        return False
    start, end = call
    if first.get(after.correlation, after.start) < after.start:  # inside the launch's work
        return end > lo
    return start > lo


def mark(figures: list[dict], steps: dict[int, StepKernels], forward, calls: dict) -> list[dict]:
    """``figures`` (``kernel_timeline.step_figures`` of ``steps``, in step order) with ``"host_bound"``: the names
    of each step's figures whose gap is host-bound (empty where none is, or where the trace has no launch calls)."""
    first = first_records(steps)
    keys = list(steps)
    for k, (step, fig) in enumerate(zip(keys, figures)):
        s, bound = steps[step], []
        found = kt.forward_span(s.verify, forward)
        if found is not None and calls:
            fwd_first, fwd_last = found
            if s.draft and host_bound(fwd_first, max(r.end for r in s.draft), calls, first):
                bound += AFTER_DRAFT
            nxt = steps[keys[k + 1]] if k + 1 < len(keys) else None
            if nxt is not None and nxt.draft:
                after = min(nxt.draft, key=lambda r: r.start)
                if host_bound(after, fwd_last.end, calls, first):
                    bound += AFTER_VERIFY
        fig["host_bound"] = tuple(bound)
    return figures


def summarize(figures: list[dict]) -> dict:
    """``kernel_timeline.summarize`` over the steps whose gap was not host-bound (all steps where every one was),
    and ``host_bound_steps``: per figure, how many steps were left out (only figures that left some out)."""
    kept, left_out = [dict(f) for f in figures], {}
    for key in kt.STEP_FIGURES:
        have = [f for f in kept if f.get(key) is not None]
        bound = [f for f in have if key in f.get("host_bound", ())]
        if bound and len(bound) < len(have):
            left_out[key] = len(bound)
            for f in bound:
                f[key] = None
    return {**kt.summarize(kept), "host_bound_steps": left_out}
