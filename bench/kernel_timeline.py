"""Boundary figures from device kernel records (a ``torch.profiler`` Chrome trace).

CUDA events measure spans on the host's stream order; the kernels themselves say where the device idles. The
decode loop marks its host-side phases with ``torch.profiler.record_function`` ranges named
``specgen::<phase>#<step>`` (``draft``, ``verify``). CUPTI gives every kernel, memcpy and memset the correlation
id of the runtime call that launched it (a graph replay's kernels share the id of its ``cudaGraphLaunch``), so
each device record is attributed to the innermost phase range enclosing its launch call. A trace whose device
records lack correlation ids (or carry ids no launch call has) falls back to time windows: a record belongs to the
last phase whose first launch call precedes the record's start on the device. That is exact only where each phase
launches after the previous phase's records have started (a host that waits for the device); where the host runs
ahead it hands a phase's records to the next one, so ``attribute_with_method`` says which method it used and the
bench records it with the figures.

A mode that runs the draft inside its step graph (``fuses_draft``) launches nothing in the draft phase: its
draft kernels come with the verify phase's replay.  Given the draft's signature (``draft_signature``: the
draft graph, profiled alone, as its device records' names in order, every copy written ``COPY``: a small copy
is a memcpy node in one capture and a copy kernel in another), ``attribute_with_method(events, draft)`` finds
it among one stream's records of such a verify phase and moves every record that starts from its first to its
last matched record back to the draft; the draft's own trailing copies (its hand-over) stay the draft's.  A
step graph that ends by drafting for the next step (``draft_at_end``) holds the next step's draft after its
own forward and tail: its signature ends with ``TRAILS``, and what it finds moves to the next step's draft.

Within a step's verify phase the *target forward* is found by its kernel names: the bare forward graph, profiled
alone, gives the name sequence, and the first place that sequence occurs among one stream's kernels of the phase
is the forward (side streams, e.g. a device guard beside the forward, do not split it). A forward that forks (a
block draft's context rows beside its later layers) may run on two streams of a replay: ``forward_lanes`` then
gives two sequences, the streams of the bare forward's first and last kernels, and ``forward_span`` finds the
second after the first's match. Everything the first stream runs in the phase before the forward is boundary
work (the head update in specgen mode, copies and host-built inputs elsewhere).
Per step::

    kernel_draft_to_verify_us  first forward kernel start - last draft record end
    head_us                    device time of the forward stream's verify-phase records before the forward
    kernel_verify_to_draft_us  next step's first draft record start - last forward kernel end

A draft's own work after the verification, inside the step graph (the block drafts' context projection:
``Proposer.draft_work_after_verify``), is found by its kernel names (profiled alone) among the step's kernels
after the forward, on any stream (the captured tail and projection may run on another stream than the
forward's); the verify->draft gap less its span is the boundary's own part of the gap::

    projection_us              last projection kernel end - first projection kernel start
    kernel_post_verify_us      kernel_verify_to_draft_us - projection_us
    post_verify_idle_us        the part of the verify->draft gap in which no device record runs

``bench/boundary_terms.py`` splits the verify->draft gap into the work the
runtime does outside the boundary's plan.
"""

from __future__ import annotations

import bisect
import re
import statistics
from operator import attrgetter

from ..engine.profiling import PHASE_PREFIX, phase_name
from .trace_records import DEVICE_CATS, DeviceRecord, StepKernels, device_records, load_trace

__all__ = [
    "DEVICE_CATS",
    "DeviceRecord",
    "StepKernels",
    "PHASE_PREFIX",
    "phase_name",
    "load_trace",
    "device_records",
    "attribute",
    "attribute_with_method",
    "launch_owners",
    "forward_names",
    "forward_lanes",
    "forward_span",
    "lanes",
    "COPY",
    "TRAILS",
    "draft_signature",
    "phase_signature",
    "split_fused",
    "step_figures",
    "summarize",
    "classify",
    "STEP_FIGURES",
    "PROJECTION_FIGURES",
]

_PHASE = re.compile(r"^specgen::(?P<phase>[a-z_]+)#(?P<step>\d+)$")
COPY = "<copy>"  # a copy in a draft signature: a memcpy or memset record, or a copy kernel
TRAILS = "<trails>"  # a draft signature's last entry when the step graph runs the draft at its end, for the next step
LAUNCH_CATS = {"cuda_runtime", "cuda_driver"}


def _phases(events: list[dict]) -> list[tuple[float, float, str, int]]:
    out = []
    for e in events:
        m = _PHASE.match(str(e.get("name", "")))
        if m and e.get("cat") != "gpu_user_annotation":
            ts = float(e["ts"])
            out.append((ts, ts + float(e.get("dur", 0.0)), m["phase"], int(m["step"])))
    return sorted(out)


def attribute(events: list[dict], draft: list[str] | tuple[str, ...] = ()) -> dict[int, StepKernels]:
    """Device records per step and phase (``attribute_with_method`` without the method)."""
    return attribute_with_method(events, draft)[0]


def attribute_with_method(
    events: list[dict], draft: list[str] | tuple[str, ...] = ()
) -> tuple[dict[int, StepKernels], str]:
    """Device records per step and phase, and how they were attributed.

    ``"correlation"``: through the launch calls' correlation ids;
    ``"time-window"``: no device record's id matched a launch inside a phase,
    so each record goes to the last phase launched before it starts.
    ``draft``: the draft's kernel names, for steps whose draft ran in the
    verify phase's graph (``split_fused``).
    """
    steps, method = _attribute(events)
    return split_fused(steps, draft), method


def split_fused(steps: dict[int, StepKernels], draft: list[str] | tuple[str, ...]) -> dict[int, StepKernels]:
    """``steps`` with the draft of every step whose draft phase is empty found in a verify phase (in place).

    The draft is the first place ``draft`` (a ``draft_signature``, less its leading copies) occurs among one
    stream's records of the verify phase; every verify record from its first matched record's start to its last
    one's moves to the step's draft.  A signature that ends with ``TRAILS`` is a draft the step graph runs at its
    end for the next step (``draft_at_end``): found in any step's verify phase, it is the next step's, and dropped
    when the next step was not profiled.  A step whose verify phase lacks the signature is left alone.
    """
    # leading copies (the carry of the previous step's state into the inputs) may run on another stream
    # than the draft proper in a graph that forks beside the draft, so they are not part of the pattern
    pattern = list(draft)
    trails = bool(pattern) and pattern[-1] == TRAILS
    pattern = pattern[:-1] if trails else pattern
    while pattern and pattern[0] == COPY:
        pattern.pop(0)
    if not pattern:
        return steps
    own = {key for key, s in steps.items() if s.draft}  # the steps whose draft phase launched their draft
    found: dict[int, list[DeviceRecord]] = {}
    for key, s in steps.items():
        if not s.verify or (key in own and not trails):
            continue
        by_stream: dict = {}
        for r in s.verify:
            by_stream.setdefault(r.stream, []).append(r)
        for records in by_stream.values():
            records.sort(key=lambda r: r.start)
            at = _find(draft_signature(records, ordered=True), pattern)
            if at is not None:
                break
        else:
            continue
        lo, hi = records[at].start, records[at + len(pattern) - 1].start
        found[key] = [r for r in s.verify if lo <= r.start <= hi]
    for key, moved in found.items():
        ids = {id(r) for r in moved}
        steps[key].verify = [r for r in steps[key].verify if id(r) not in ids]
        to = key + 1 if trails else key
        if to in steps and to not in own:
            steps[to].draft = moved
    return steps


def launch_owners(
    events: list[dict], phases: list[tuple[float, float, str, int]] | None = None
) -> tuple[dict[int, tuple[str, int]], dict[tuple[str, int], float]]:
    """Which ``(phase, step)`` range launched each correlation id (the innermost range enclosing the launch
    call), and each range's first launch time; ``phases`` defaults to every ``specgen::<phase>#<step>`` range."""
    phases = _phases(events) if phases is None else phases
    starts = [p[0] for p in phases]
    owner: dict[int, tuple[str, int]] = {}
    first_launch: dict[tuple[str, int], float] = {}
    for e in events:
        if e.get("cat") not in LAUNCH_CATS:
            continue
        ts = float(e["ts"])
        # innermost enclosing phase: the latest-starting range that still contains ts
        i = bisect.bisect_right(starts, ts) - 1
        while i >= 0:
            lo, hi, phase, step = phases[i]
            if lo <= ts <= hi:
                corr = (e.get("args") or {}).get("correlation")
                if corr is not None:
                    owner[corr] = (phase, step)
                key = (phase, step)
                first_launch[key] = min(ts, first_launch.get(key, ts))
                break
            i -= 1
    return owner, first_launch


def _attribute(events: list[dict]) -> tuple[dict[int, StepKernels], str]:
    owner, first_launch = launch_owners(events)
    records = device_records(events)
    steps: dict[int, StepKernels] = {}
    matched = [r for r in records if r.correlation in owner]
    if matched:
        for r in matched:
            _add(steps, *owner[r.correlation], r)
        return dict(sorted(steps.items())), "correlation"
    windows = sorted((t, key) for key, t in first_launch.items())
    times = [t for t, _ in windows]
    for r in records:
        i = bisect.bisect_right(times, r.start) - 1
        if i >= 0:
            _add(steps, *windows[i][1], r)
    return dict(sorted(steps.items())), "time-window"


def _add(steps: dict[int, StepKernels], phase: str, step: int, r: DeviceRecord) -> None:
    if phase in ("draft", "verify"):
        getattr(steps.setdefault(step, StepKernels()), phase).append(r)


def forward_names(events: list[dict]) -> list[str]:
    """The kernel names of a bare trace, in order, on its main stream: the one with the most kernels (on a tie,
    the first to run one)."""
    return [r.name for r in max(_lanes(events).values(), key=lambda rs: (len(rs), -rs[0].start), default=[])]


def forward_lanes(events: list[dict]) -> list[str] | list[list[str]]:
    """A bare forward's kernel names as the pattern ``forward_span`` finds: one list where the forward ran on
    one stream; else two, the stream of its first kernel and the stream of its last one.  A forward that forks
    (a block draft's context rows beside the later layers) may be continued by either stream of a graph
    replay, so neither stream alone runs it from start to end."""
    lanes = _lanes(events)
    if not lanes:
        return []
    first = min(lanes.values(), key=lambda rs: rs[0].start)
    last = max(lanes.values(), key=lambda rs: max(r.end for r in rs))
    return [r.name for r in first] if first is last else [[r.name for r in first], [r.name for r in last]]


def _lanes(events: list[dict]) -> dict:
    kernels = [r for r in device_records(events) if r.cat == "kernel"]
    return {s: [r for r in kernels if r.stream == s] for s in dict.fromkeys(r.stream for r in kernels)}


def _is_copy(r: DeviceRecord) -> bool:
    # a multi-tensor copy (``torch._foreach_copy_``) is one kernel whose op names it: ``at::native::Copy<...>``
    foreach_copy = "multi_tensor_apply_kernel" in r.name and "native::Copy<" in r.name
    return r.cat != "kernel" or "memcpy" in r.name.lower() or "direct_copy_kernel" in r.name or foreach_copy


def draft_signature(records: list[DeviceRecord], ordered: bool = False) -> list[str]:
    """``records`` (sorted by start unless ``ordered``) as names, every copy as ``COPY``."""
    return [COPY if _is_copy(r) else r.name for r in (records if ordered else sorted(records, key=lambda r: r.start))]


def phase_signature(steps: dict[int, StepKernels], phase: str = "draft") -> list[str]:
    """The ``draft_signature`` of the first step whose ``phase`` has records (e.g. the draft graph alone)."""
    for s in steps.values():
        records = getattr(s, phase)
        if records:
            return draft_signature(records)
    return []


def _find(names: list[str], pattern: list[str]) -> int | None:
    n = len(pattern)
    if not n or n > len(names):
        return None
    first = pattern[0]
    for i, name in enumerate(names[: len(names) - n + 1]):
        if name == first and names[i : i + n] == pattern:
            return i
    return None


def _locate(records: list[DeviceRecord], forward: list[str]) -> tuple[list[DeviceRecord], int] | None:
    """The forward stream's kernels of a phase and the forward's index among them (None: not found)."""
    by_stream: dict = {}
    for r in records:
        if r.cat == "kernel":
            by_stream.setdefault(r.stream, []).append(r)
    for kernels in by_stream.values():
        at = _find([r.name for r in kernels], forward)
        if at is not None:
            return kernels, at
    return None


def lanes(forward) -> list[list[str]]:
    """``forward`` (``forward_names``' one list or ``forward_lanes``' one or two) as a list of lanes."""
    return [list(forward)] if not forward or isinstance(forward[0], str) else [list(lane) for lane in forward]


def forward_span(records: list[DeviceRecord], forward) -> tuple[DeviceRecord, DeviceRecord] | None:
    """The forward's first and last kernels among a phase's records (None: not found).  ``forward``: a list of
    kernel names run on one stream, or ``forward_lanes``' two, the second found after the first one's start
    among the records the first did not match (a short last lane cannot match inside the first)."""
    first_lane, *more = lanes(forward)
    found = _locate(records, first_lane)
    if found is None:
        return None
    kernels, at = found
    first, last = kernels[at], kernels[at + len(first_lane) - 1]
    for lane in more:
        taken = {id(r) for r in kernels[at : at + len(first_lane)]}
        other = _locate([r for r in records if r.start >= first.start and id(r) not in taken], lane)
        if other is None:
            return None
        last = max(last, other[0][other[1] + len(lane) - 1], key=attrgetter("end"))
    return first, last


STEP_FIGURES = (
    "kernel_draft_to_verify_us",
    "head_us",
    "kernel_verify_to_draft_us",
    "projection_us",
    "kernel_post_verify_us",
    "post_verify_idle_us",
)
PROJECTION_FIGURES = STEP_FIGURES[3:]  # only where the draft's own work after the verification was given


def step_figures(
    steps: dict[int, StepKernels], forward: list, projection: list[str] | tuple[str, ...] = ()
) -> list[dict]:
    """Per step: the kernel-level draft->verify and verify->draft gaps and the head time (us); with
    ``projection`` (the kernel names of the draft's own work after the verification, profiled alone) also
    ``PROJECTION_FIGURES`` (see the module docstring).

    A figure is ``None`` where the step lacks the records it needs (no
    draft kernels, forward or projection not found, or no following step).
    """
    out = []
    keys = list(steps)
    for k, step in enumerate(keys):
        s = steps[step]
        fig = {"step": step, **dict.fromkeys(STEP_FIGURES[: 3 + 3 * bool(projection)])}
        found = forward_span(s.verify, forward)
        if found is not None:
            fwd_first, fwd_last = found
            fig["head_us"] = sum(r.dur for r in s.verify if r.stream == fwd_first.stream and r.start < fwd_first.start)
            if s.draft:
                fig["kernel_draft_to_verify_us"] = fwd_first.start - max(r.end for r in s.draft)
            nxt = steps.get(keys[k + 1]) if k + 1 < len(keys) else None
            if nxt is not None and nxt.draft:
                first_draft = min(r.start for r in nxt.draft)
                gap = fig["kernel_verify_to_draft_us"] = first_draft - fwd_last.end
                if projection:  # the tail and the projection may run on another stream than the forward's
                    after = sorted(
                        (r for r in s.verify if r.cat == "kernel" and r.start >= fwd_last.end), key=attrgetter("start")
                    )
                    fig.update(_post_verify(after, projection, s, nxt, fwd_last.end, gap))
        out.append(fig)
    return out


def _post_verify(after: list[DeviceRecord], projection, step: StepKernels, nxt: StepKernels, lo: float, gap: float):
    """``PROJECTION_FIGURES`` of one verify->draft gap from ``lo`` (the forward's end), ``gap`` us long;
    ``after``: the step's kernels after the forward, on every stream, in start order."""
    hi = lo + gap
    busy, idle = lo, 0.0  # a sweep over every device record of the two steps, clipped to the gap
    for r in sorted(step.draft + step.verify + nxt.draft + nxt.verify, key=lambda r: r.start):
        if r.end <= lo or r.start >= hi:
            continue
        idle += max(0.0, r.start - busy)
        busy = max(busy, min(r.end, hi))
    out = {"post_verify_idle_us": idle + max(0.0, hi - busy)}
    at = _find([r.name for r in after], list(projection))
    if at is not None:
        first, last = after[at], after[at + len(projection) - 1]
        if last.end <= hi:
            span = last.end - first.start
            out |= {"projection_us": span, "kernel_post_verify_us": gap - span}
    return out


def classify(step: StepKernels, forward: list) -> list[tuple[DeviceRecord, str]]:
    """One step's device records labelled ``draft``, ``head``, ``forward`` or ``tail`` (for drawing).

    Verify-phase records before the forward's first kernel are ``head``,
    after its last ``tail``; without a located forward every verify record
    is ``forward``.
    """
    out = [(r, "draft") for r in step.draft]
    found = forward_span(step.verify, forward)
    if found is None:
        return out + [(r, "forward") for r in step.verify]
    lo, hi = found[0].start, found[1].end
    for r in step.verify:
        out.append((r, "head" if r.start < lo else "tail" if r.start >= hi else "forward"))
    return out


def summarize(figures: list[dict]) -> dict:
    """Medians of each figure over the steps that have it (``None`` where none does)."""
    out = {}
    keys = [key for key in STEP_FIGURES if any(key in f for f in figures)] or list(STEP_FIGURES[:3])
    for key in keys:
        vals = [f[key] for f in figures if f.get(key) is not None]
        out[key] = round(statistics.median(vals), 3) if vals else None
    return out
