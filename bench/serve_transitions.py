"""Device idle at the serving loop's batch transitions, from a kernel trace.

The serving loop marks each decode step's host part (the row remap, the draft, the
step's launch) with ``record_function`` ranges named ``specgen::serve#<step>`` and each
prefill chunk with ``specgen::prefill#<step>``.  ``TransitionProfiler`` (a loop
observer) runs ``torch.profiler`` over ``count`` decode steps of one run, starting at
decode step ``start``; ``transition_idle`` then attributes every kernel, memcpy and
memset to the range whose launch call made it (CUPTI's correlation ids, as
``kernel_timeline`` does for the decode phases) and measures, between consecutive
profiled decode steps ``a`` and ``b``, the **device idle**: the time from the end of
``a``'s last device record to the start of ``b``'s first one that no device record of
any range (a prefill between them, the remap before ``b``) covers.

Each gap is classified by what changed before step ``b`` (``StepRecord`` of ``b`` against
the decode step before it):

* ``bucket``: the step ran in another captured bucket (``specgen``);
* ``join``: rows were written fresh (a request's first step after its prefill, or one
  back from sitting a step out);
* ``leave``: fewer rows than the step before, none joined;
* ``reorder``: the same rows moved to other indices;
* ``steady``: nothing changed.

A transition's cost is its idle against the steady gaps' (the issue's figure: each
transition adds at most 10 us of device idle).  ``device_time`` says where the window's device
time went: the busy time of each decode step's and each prefill chunk's records, and the idle
that neither covered (what a step's TPOT is made of under load).  ``plot_transition_idle`` draws the idle
per kind and mode (``transition_idle.png``, ``serve_report.plot_transition_idle``).
"""

from __future__ import annotations

import bisect
import statistics
import tempfile
from pathlib import Path

from .kernel_timeline import _phases, device_records, launch_owners, load_trace

__all__ = [
    "KINDS",
    "TransitionProfiler",
    "device_time",
    "kind_of",
    "summarize_idle",
    "transition_idle",
    "transition_idle_marks",
]

KINDS = ("steady", "join", "leave", "reorder", "bucket")
SERVE_PHASE, PREFILL_PHASE = "serve", "prefill"


def kind_of(step, before) -> str:
    """The transition into ``step`` (a ``StepRecord``) from ``before`` (the decode step before it)."""
    if step.bucket is not None and before.bucket is not None and step.bucket != before.bucket:
        return "bucket"
    if step.joined:
        return "join"
    if step.batch < before.batch:
        return "leave"
    if step.remaps:
        return "reorder"
    return "steady"


def _by_range(events: list[dict]) -> list[tuple[str, int, list]]:
    """Device records per range (``(phase, step, records)``), by the correlation id of their launch call; an
    iteration's prefill chunks are ranges of one name, each kept apart."""
    phases = [p for p in _phases(events) if p[2] in (SERVE_PHASE, PREFILL_PHASE)]
    # each range by its place in ``phases``, so that ranges of one name do not merge
    owner, _ = launch_owners(events, [(lo, hi, phase, i) for i, (lo, hi, phase, _) in enumerate(phases)])
    records: dict[int, list] = {}
    for r in device_records(events):
        key = owner.get(r.correlation)
        if key is not None:
            records.setdefault(key[1], []).append(r)
    return [(phases[i][2], phases[i][3], recs) for i, recs in sorted(records.items())]


class _Cover:
    """The union of labelled device records, merged once into disjoint intervals: the idle of any window is
    then a bisection and a walk over the intervals inside it (a profiled window holds 10^5 records)."""

    def __init__(self, labelled: list[tuple[float, float, str]]):
        merged: list[list] = []  # [start, end, the first record's label, the label of the record that ends it]
        for s, e, label in sorted(labelled):
            if merged and s <= merged[-1][1]:
                if e > merged[-1][1]:
                    merged[-1][1], merged[-1][3] = e, label
            else:
                merged.append([s, e, label, label])
        self.merged = merged
        self.starts = [m[0] for m in merged]

    def holes(self, lo: float, hi: float) -> list[tuple[float, float, str, str]]:
        """The intervals of ``[lo, hi]`` no record covers, in order, each with the labels of the records that
        end its left edge and start its right edge (``"?"`` where none does inside the window's reach)."""
        out: list[tuple[float, float, str, str]] = []
        if hi <= lo:
            return out
        i = max(bisect.bisect_right(self.starts, lo) - 1, 0)
        at, left, right = lo, "?", "?"
        for s, e, first, last in self.merged[i:]:
            if s >= hi:
                right = first
                break
            if e <= at:
                left = last
                continue
            if s > at:
                out.append((at, s, left, first))
            at, left = max(at, e), last
        if hi > at:
            out.append((at, hi, left, right))
        return out

    def uncovered(self, lo: float, hi: float) -> float:
        """The length of ``[lo, hi]`` that no record covers."""
        return sum(e - s for s, e, _, _ in self.holes(lo, hi))


def _uncovered(lo: float, hi: float, spans: list[tuple[float, float]]) -> float:
    """The length of ``[lo, hi]`` that no span covers."""
    return _Cover([(s, e, "") for s, e in spans]).uncovered(lo, hi)


def _between(holes: list[tuple[float, float, str, str]]) -> dict[str, float]:
    """The idle of ``holes`` by what lies on either side: ``"<before>><after>"`` -> us, each side the phase of
    the device record that ends the hole's left edge or starts its right edge (``serve``, ``prefill``)."""
    out: dict[str, float] = {}
    for lo, hi, left, right in holes:
        key = f"{left}>{right}"
        out[key] = round(out.get(key, 0.0) + hi - lo, 3)
    return out


def transition_idle(events, steps: list) -> list[dict]:
    """Per pair of consecutive profiled decode steps: ``{"step", "kind", "idle_us", "before_us", "batch",
    "prev_batch", "prefills", "holes", "between"}``; ``before_us``: the part of ``idle_us`` right before the
    step, from the end of the device's last record (of step ``a`` or a prefill chunk between them) to ``b``'s
    first: how long the device waited for the step's own launch (the rest of ``idle_us`` lies between prefill
    kernels, the host launching them).  ``outside_us``: the idle that lies outside every range's own extent
    (first record to last): what the transition itself costs, without the gaps between a prefill chunk's own
    kernels (a captured chunk of a few hundred kernels leaves a microsecond or so between each).
    ``prefills``: the prefill chunks launched after ``a`` up to ``b``;
    ``holes``: how many separate idle intervals make ``idle_us``; ``between``: their idle by the phases of
    the records on either side (``"serve>prefill"``: after step ``a``, before a prefill's first record, the
    host late in launching the chunk; ``"prefill>prefill"``: among a chunk's own records; ``"prefill>serve"``:
    ``before_us`` when a chunk ran last).

    ``events``: the profiled window's trace (a path or the events); ``steps``: the run's ``StepRecord``s
    (their ``step`` numbers name the ranges).  Steps without device records (none profiled) are skipped.
    """
    ev = load_trace(events) if not isinstance(events, list) else events
    return _gaps([(phase, k, [(r.start, r.end) for r in recs]) for phase, k, recs in _by_range(ev)], steps)


def transition_idle_marks(extents: list[tuple[str, int, float, float]], steps: list) -> list[dict]:
    """``transition_idle``'s gaps from ``DeviceMarks.extents()`` (each range one interval, from the timing
    events at its ends, no profiler): ``idle_us`` and ``outside_us`` are then the same figure, the device idle
    outside every range, which only the host's lateness causes."""
    return _gaps([(phase, k, [(s, e)]) for phase, k, s, e in extents if phase in (SERVE_PHASE, PREFILL_PHASE)], steps)


def _gaps(ranges: list[tuple[str, int, list[tuple[float, float]]]], steps: list) -> list[dict]:
    """The gaps between consecutive decode steps of ``ranges`` (``(phase, step, spans)``: one per range; an
    iteration's prefill chunks are several ranges of one step)."""
    cover = _Cover([(s, e, phase) for phase, _, spans in ranges for s, e in spans])
    # each range as one interval, first record to last: the gaps inside a chunk's own work are its own
    extents = _Cover([(min(s for s, _ in spans), max(e for _, e in spans), "") for _, _, spans in ranges])
    records = {s.step: s for s in steps}
    serve: dict[int, list[tuple[float, float]]] = {}
    for phase, k, spans in ranges:
        if phase == SERVE_PHASE and k in records:
            serve.setdefault(k, []).extend(spans)
    decode = sorted(serve)
    prefills = sorted(k for phase, k, _ in ranges if phase == PREFILL_PHASE)
    out = []
    for a, b in zip(decode, decode[1:]):
        end_a = max(e for _, e in serve[a])
        start_b = min(s for s, _ in serve[b])
        ra, rb = records[a], records[b]
        holes = cover.holes(end_a, start_b)
        # right before ``b``: the hole that ends where ``b`` starts, from the device's last record before it
        before = holes[-1][1] - holes[-1][0] if holes and holes[-1][1] == start_b else 0.0
        out.append(
            {
                "step": b,
                "kind": kind_of(rb, ra),
                "idle_us": round(sum(e - s for s, e, _, _ in holes), 3),
                "before_us": round(before, 3),
                "outside_us": round(extents.uncovered(end_a, start_b), 3),
                "batch": rb.batch,
                "prev_batch": ra.batch,
                "prefills": bisect.bisect_right(prefills, b) - bisect.bisect_right(prefills, a),
                "holes": len(holes),
                "between": _between(holes),
            }
        )
    return out


def _busy(spans: list[tuple[float, float]]) -> float:
    """The length of the union of ``spans``: their extent less what none of them covers."""
    lo, hi = min(s for s, _ in spans), max(e for _, e in spans)
    return hi - lo - _uncovered(lo, hi, spans)


def device_time(events) -> dict | None:
    """Where the profiled window's device time went: per phase (``serve``: decode steps, ``prefill``: prefill
    chunks) the ranges, their busy time in total and the median per range (us; overlapping records counted
    once), and the window (first to last record of any range) with the time no record covered."""
    ev = load_trace(events) if not isinstance(events, list) else events
    ranges = _by_range(ev)
    if not ranges:
        return None
    out: dict = {}
    for phase in (SERVE_PHASE, PREFILL_PHASE):
        busy = [_busy([(r.start, r.end) for r in recs]) for p, _, recs in ranges if p == phase]
        out[phase] = {
            "ranges": len(busy),
            "busy_us": round(sum(busy), 3),
            "p50_us": round(statistics.median(busy), 3) if busy else None,
        }
    spans = [(r.start, r.end) for _, _, recs in ranges for r in recs]
    lo, hi = min(s for s, _ in spans), max(e for _, e in spans)
    out["window_us"] = round(hi - lo, 3)
    out["idle_us"] = round(_uncovered(lo, hi, spans), 3)
    return out


def summarize_idle(gaps: list[dict]) -> dict:
    """Per kind: how many, and the median, p90 and largest idle (us), the median of the idle right before the
    step (``before_p50_us``), the median and largest idle outside every range's extent (``outside_p50_us``,
    ``outside_max_us``), the kind's total idle by the phases on either side (``between_us``, as
    ``transition_idle``'s ``between``); ``added_us``: a kind's median less the steady gaps' median (None without steady
    gaps)."""
    out: dict[str, dict] = {}
    for kind in KINDS:
        xs = sorted(g["idle_us"] for g in gaps if g["kind"] == kind)
        if xs:
            p90 = xs[min(len(xs) - 1, int(round(0.9 * (len(xs) - 1))))]
            out[kind] = {"n": len(xs), "p50_us": statistics.median(xs), "p90_us": p90, "max_us": xs[-1]}
            before = [g["before_us"] for g in gaps if g["kind"] == kind and "before_us" in g]
            if before:
                out[kind]["before_p50_us"] = statistics.median(before)
            outside = sorted(g["outside_us"] for g in gaps if g["kind"] == kind and "outside_us" in g)
            if outside:
                out[kind]["outside_p50_us"] = statistics.median(outside)
                out[kind]["outside_max_us"] = outside[-1]
            where: dict[str, float] = {}
            for g in gaps:
                if g["kind"] == kind:
                    for k, us in (g.get("between") or {}).items():
                        where[k] = round(where.get(k, 0.0) + us, 3)
            if where:  # the kind's whole idle, by what lies on either side of it
                out[kind]["between_us"] = where
    base = out.get("steady", {}).get("p50_us")
    for kind, s in out.items():
        s["added_us"] = None if base is None or kind == "steady" else round(s["p50_us"] - base, 3)
    return out


class TransitionProfiler:
    """A ``ServingLoop`` observer: ``torch.profiler`` over ``count`` decode steps from decode step ``start``
    (counted among the steps that decode); ``result(run)`` gives the gaps and their summary."""

    def __init__(self, start: int = 8, count: int = 200):
        if start < 0 or count < 2:
            raise ValueError("profile at least two decode steps, from a step >= 0")
        self.start, self.count = int(start), int(count)
        self._decoded, self._prof, self._events, self._done = 0, None, None, False

    def before_step(self, loop, out) -> None:
        if out.verify and self._prof is None and not self._done and self._decoded >= self.start:
            import torch

            from ..engine.profiling import activities

            self._prof = torch.profiler.profile(activities=activities(loop.device))
            self._prof.__enter__()
            self._first = self._decoded

    def after_step(self, loop, out) -> None:
        if out.verify:
            self._decoded += 1
        if self._prof is not None and (self._decoded - self._first >= self.count or loop.scheduler.done):
            self.stop(loop.device)

    def stop(self, device) -> None:
        """End the profiled window (waits for the device, so the last step's records are in)."""
        if self._prof is None:
            return
        import torch

        if device.type == "cuda":
            torch.cuda.synchronize(device)
        self._prof.__exit__(None, None, None)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "trace.json"
            self._prof.export_chrome_trace(str(path))
            self._events = load_trace(path)
        self._prof, self._done = None, True

    def result(self, run) -> dict | None:
        """``{"gaps": [...], "summary": {...}}`` for ``run``'s steps; None when nothing was profiled."""
        if self._events is None:
            return None
        gaps = transition_idle(self._events, run.steps)
        return {
            "profiled_from_step": self.start,
            "gaps": gaps,
            "summary": summarize_idle(gaps),
            "device_time": device_time(self._events),
        }
