"""The cost model's calibration (``costs.json``): device figures from profiled decode steps, host API figures
from an unprofiled host clock (``bench/host_clock.py``).

``samples(events, forward)`` reads one profiled run's Chrome trace events
and returns lists of microsecond figures keyed the way the cost file names
them (``run.h2d``, ``issue.device_kernel``, ``in_graph_kernel``,
``host_family.<family>``, ...); ``costs(...)`` pools the runs of a bench
into the file ``specgen plan --costs`` reads: medians in the loadable part
(``run`` / ``issue`` / ``in_graph_*`` / ``host_family``), and under
``measured`` each figure's median, sample count and what it was taken from.
A figure without samples is left out (the model keeps its default).

The ``issue.*`` figures the model loads are the host clock's, not the
profile's: CUPTI inflates the host duration of every API call it records, so
the profiled ``issue.*`` figures stay under ``measured`` as
``profiled.issue.*`` (``"loaded": false``) for comparison only.  Every
``measured`` entry names its ``method`` (a key of ``METHODS``, described in
the file's ``methods``), ``method`` maps each loaded figure to it, and the
file records the ``machine`` and the ``model_shape`` it was measured on and
what was ``not_measured`` (on the CPU: events and graph launches).

What each figure is, from the trace (CUPTI device records and the CUDA
runtime / driver calls on the host; only the last kind on the CPU):

* ``issue.<kind>``: host duration of the call that issues the work:
  kernel launches (``cudaLaunchKernel``, ``cuLaunchKernel``, ...),
  ``cudaMemcpyAsync`` by the direction of the copy it made, ``cudaEventRecord``,
  ``cudaStreamWaitEvent``, ``cudaGraphLaunch``.
* ``run.h2d`` / ``run.d2h``: device time of copies not launched by a graph.
* ``run.device_kernel``: device time of the verify phase's kernels outside
  the target forward (the head and tail updates, acceptance), in a graph or not;
  ``in_graph_kernel`` / ``in_graph_copy``: the same kernels, and the copies,
  that a graph replay launched; ``in_graph_gap``: the idle between two such
  kernels that ran one after the other on one stream.  Kernel figures need the forward's kernel names.
* ``run.host_sync``: the host's wake-up latency of a synchronizing call
  (``cudaStreamSynchronize``, ``cudaEventSynchronize``,
  ``cudaDeviceSynchronize``, a synchronous ``cudaMemcpy``): from the last
  device record that ended during the call to the call's return (the call's
  whole duration when nothing ended during it).
* ``host_family.<family>``: the host-serial mode's own time for one
  family's torch semantics in one step (``profiling.host_range`` marks).
  Where the host clock timed the family (``bench/host_clock.py``: the same
  semantics over host copies of the step buffers, unprofiled), its figure is
  the loaded one and the profiled ranges' stay under ``measured`` as
  ``profiled.host_family.<family>``.
* ``boundary.<mode>.<term>``: what the runtime of ``mode`` does at
  verify->draft outside the boundary's plan (``boundary_terms.boundary_terms``,
  ``BOUNDARY_TERMS``): the casting copy after the forward, the host-field
  pack in the step graph, the work queued after the replay, the graph-to-graph switch, the host's turnaround after a
  read-back.  ``pack_kernel`` and ``graph_switch_behind_copies`` stay under
  ``measured`` only (``"loaded": false``): the first is part of
  ``after_replay``, the second the switch's long case (the next graph's
  draft behind its memcpy nodes), which the model does not take.
"""

from __future__ import annotations

import bisect
import statistics

from ..engine.profiling import HOST_RANGE_PREFIX
from . import boundary_terms as bterms
from . import kernel_timeline as kt

__all__ = ["KERNEL_LAUNCHES", "METHODS", "SYNC_CALLS", "costs", "merge", "method_of", "samples"]

KERNEL_LAUNCHES = frozenset(
    {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchCooperativeKernel"}
)
SYNC_CALLS = bterms.SYNC_CALLS
ISSUE_CALLS = {
    "cudaEventRecord": "issue.event_record",
    "cudaEventRecordWithFlags": "issue.event_record",
    "cudaStreamWaitEvent": "issue.event_wait",
    "cudaGraphLaunch": "issue.graph_replay",
}
GRAPH_LAUNCHES = frozenset({"cudaGraphLaunch", "cuGraphLaunch"})

# what each figure is taken from, for the reader of the file
SOURCES = {
    "issue.device_kernel": "host duration of kernel launch calls (cudaLaunchKernel, cuLaunchKernel*)",
    "issue.h2d": "host duration of cudaMemcpyAsync host-to-device",
    "issue.d2h": "host duration of cudaMemcpyAsync device-to-host",
    "issue.event_record": "host duration of cudaEventRecord",
    "issue.event_wait": "host duration of cudaStreamWaitEvent",
    "issue.graph_replay": "host duration of cudaGraphLaunch",
    "run.h2d": "device time of host-to-device copies outside graphs",
    "run.d2h": "device time of device-to-host copies outside graphs",
    "run.device_kernel": "device time of verify-phase kernels outside the target forward",
    "in_graph_kernel": "device time of verify-phase kernels outside the target forward launched by a graph replay",
    "in_graph_copy": "device time of copies launched by a graph replay",
    "in_graph_gap": "idle between two kernels outside the forward that a graph replay ran back to back on one stream",
    "run.host_sync": "host wake-up latency of synchronizing calls (call end - last device record end)",
}
NOT_LOADED_TERMS = frozenset({"pack_kernel", "graph_switch_behind_copies"})  # boundary terms for the reader only


IN_GRAPH_GAP_MAX_US = 3.0  # a longer idle between two of a graph's kernels is a wait (a join, a switch)
HOST_CLOCK = "host_clock"
PROFILED_CALL = "profiled_host_call"
# how each figure was taken: every ``measured`` entry names one of these as its ``method``
METHODS = {
    HOST_CLOCK: "unprofiled: time.perf_counter_ns around each API call (or a host-serial family's torch "
    "semantics), no profiler active, the stream synchronized before each call; the median of many repeats "
    "(bench/host_clock.py)",
    "kernel_trace": "device records of the profiled steps' kernel trace (torch.profiler / CUPTI)",
    "profiled_sync": "profiled steps: a synchronizing call's end minus the last device record's end",
    "profiled_host_range": "profiled steps: host duration of the host-serial mode's marked family ranges",
    "profiled_read_back": "profiled steps: a synchronizing call's return to the next step's first draft record "
    "(the host's work under the profiler, which inflates it as it does the kernel-level bubbles)",
    PROFILED_CALL: "profiled steps: host duration of the API call under CUPTI, which inflates it; recorded "
    "as profiled.issue.* for comparison, never loaded",
}


def _copy_kind(name: str) -> str | None:
    return "h2d" if "HtoD" in name else "d2h" if "DtoH" in name else None


def samples(
    events: list[dict],
    forward: list[str] | tuple[str, ...] = (),
    draft: list[str] | tuple[str, ...] = (),
    mode: str | None = None,
) -> dict[str, list[float]]:
    """One profiled run's figures (us), keyed like the cost file; see the module docstring.  ``mode``: the
    run's mode, which keys its ``boundary.*`` figures (none without it or without ``forward``)."""
    out: dict[str, list[float]] = {}
    add = lambda key, us: out.setdefault(key, []).append(round(float(us), 3))  # noqa: E731
    calls = [e for e in events if e.get("cat") in kt.LAUNCH_CATS]
    records = kt.device_records(events)
    by_corr = {}
    for r in records:
        if r.correlation is not None:
            by_corr.setdefault(r.correlation, []).append(r)
    graph_corr = set()
    ends = sorted(r.end for r in records)
    for e in calls:
        name, dur = str(e.get("name", "")), float(e.get("dur", 0.0))
        corr = (e.get("args") or {}).get("correlation")
        if name in GRAPH_LAUNCHES and corr is not None:
            graph_corr.add(corr)
        if name in KERNEL_LAUNCHES:
            add("issue.device_kernel", dur)
        elif name in ISSUE_CALLS:
            add(ISSUE_CALLS[name], dur)
        elif name == "cudaMemcpyAsync":
            kinds = {_copy_kind(r.name) for r in by_corr.get(corr, ())} - {None}
            if len(kinds) == 1:
                add(f"issue.{kinds.pop()}", dur)
        if name in SYNC_CALLS:
            lo, hi = float(e["ts"]), float(e["ts"]) + dur
            i = bisect.bisect_right(ends, hi) - 1
            add("run.host_sync", hi - ends[i] if i >= 0 and ends[i] >= lo else dur)
    for r in records:
        if r.cat == "gpu_memcpy":
            if r.correlation in graph_corr:
                add("in_graph_copy", r.dur)
            elif _copy_kind(r.name):
                add(f"run.{_copy_kind(r.name)}", r.dur)
    if forward:
        names = {n for lane in kt.lanes(forward) for n in lane}
        steps = kt.attribute(events, draft)
        for step in steps.values():
            for r in step.verify:
                if r.cat == "kernel" and r.name not in names:
                    add("run.device_kernel", r.dur)
                    if r.correlation in graph_corr:
                        add("in_graph_kernel", r.dur)
            for gap in _in_graph_gaps(step.verify, names, graph_corr):
                add("in_graph_gap", gap)
        if mode:
            for term, vals in bterms.boundary_terms(events, steps, forward).items():
                out.setdefault(f"boundary.{mode}.{term}", []).extend(vals)
    for e in events:
        name = str(e.get("name", ""))
        if name.startswith(HOST_RANGE_PREFIX) and e.get("cat") != "gpu_user_annotation":
            add("host_family." + name[len(HOST_RANGE_PREFIX) :].split("#")[0], float(e.get("dur", 0.0)))
    return out


def _in_graph_gaps(records, forward_names: set[str], graph_corr: set) -> list[float]:
    """The idle between two kernels outside the forward that one graph replay ran one after the other on one
    stream (no record of that stream between them); a gap of ``IN_GRAPH_GAP_MAX_US`` or more is a wait, not a
    launch's hand-over, and is left out."""
    out, by_stream = [], {}
    for r in records:
        by_stream.setdefault(r.stream, []).append(r)
    for rs in by_stream.values():
        rs.sort(key=lambda r: r.start)
        for a, b in zip(rs, rs[1:]):
            if not all(r.cat == "kernel" and r.name not in forward_names for r in (a, b)):
                continue
            if (
                a.correlation == b.correlation
                and a.correlation in graph_corr
                and 0 <= b.start - a.end < IN_GRAPH_GAP_MAX_US
            ):
                out.append(b.start - a.end)
    return out


def merge(into: dict[str, list[float]], more: dict[str, list[float]]) -> dict[str, list[float]]:
    """``into`` with ``more``'s samples appended (in place; returned)."""
    for k, v in more.items():
        into.setdefault(k, []).extend(v)
    return into


def _loadable(pool: dict[str, list[float]]) -> dict:
    """The part of a cost file the model reads: the median of every figure that has samples."""
    out: dict = {}
    for key, vals in sorted(pool.items()):
        if not vals:
            continue
        med = round(statistics.median(vals), 3)
        part, _, name = key.partition(".")
        if part in ("run", "issue"):
            out.setdefault(part, {})[name] = med
        elif part == "host_family":
            out.setdefault("host_family", {})[name] = med
        elif part == "boundary":
            mode, _, term = name.partition(".")
            out.setdefault("boundary", {}).setdefault(mode, {})[term] = med
        else:
            out[key] = med
    return out


def _measured(pool: dict[str, list[float]]) -> dict:
    out = {}
    for key, vals in sorted(pool.items()):
        if vals:
            q = statistics.quantiles(vals, n=4) if len(vals) > 1 else [vals[0]] * 3
            out[key] = {
                "us": round(statistics.median(vals), 3),
                "samples": len(vals),
                "p25": round(q[0], 3),
                "p75": round(q[2], 3),
                "from": SOURCES.get(key, _source(key)),
            }
    return out


def _source(key: str) -> str:
    if key.startswith("host_family."):
        return "host duration of the host-serial mode's own torch semantics for this family in one step"
    if key.startswith("boundary."):
        return bterms.BOUNDARY_TERMS.get(key.rsplit(".", 1)[-1], key)
    return key


def _loaded(key: str) -> bool:
    """Whether a profiled figure goes into the loadable part (``boundary.*.pack_kernel`` and the switch's long
    case stay under ``measured``)."""
    return not key.startswith("issue.") and not (
        key.startswith("boundary.") and key.rsplit(".", 1)[-1] in NOT_LOADED_TERMS
    )


def method_of(key: str) -> str:
    """How a figure of the profiled steps was taken (a key of ``METHODS``)."""
    if key.startswith("issue."):
        return PROFILED_CALL
    if key.startswith("host_family."):
        return "profiled_host_range"
    if key.startswith("boundary.") and key.endswith(".read_back"):
        return "profiled_read_back"
    return "profiled_sync" if key == "run.host_sync" else "kernel_trace"


def _document(profiled: dict[str, list[float]], clocked: dict[str, list[float]], how: dict[str, str]) -> dict:
    """Loadable medians, ``measured`` and ``method`` of one pool: the host clock's figures (``issue.*``, and the
    ``host_family.*`` it timed), the profile's others; the profile's ``issue.*`` and the host-family figures the
    clock also has only under ``measured`` (``profiled.<key>``, not loaded)."""
    kept = {k: v for k, v in profiled.items() if _loaded(k) and k not in clocked and v}
    calls = {k: v for k, v in profiled.items() if (k.startswith("issue.") or k in clocked) and v}
    aside = {k: v for k, v in profiled.items() if not _loaded(k) and not k.startswith("issue.") and v}
    loaded = merge(dict(kept), {k: v for k, v in clocked.items() if v})
    doc = _loadable(loaded)
    measured = _measured(loaded)
    for k, entry in measured.items():
        entry["method"] = HOST_CLOCK if k in clocked else method_of(k)
        if k in clocked:
            entry["from"] = how.get(k, entry["from"])
    for k, entry in _measured(calls).items():
        measured["profiled." + k] = dict(entry, method=method_of(k), loaded=False)
    for k, entry in _measured(aside).items():
        measured[k] = dict(entry, method=method_of(k), loaded=False)
    doc["measured"] = measured
    doc["method"] = {k: e["method"] for k, e in measured.items() if e.get("loaded", True)}
    return doc


def costs(
    by_batch: dict[int, dict[str, list[float]]],
    source: dict,
    clocked: dict[int, dict[str, list[float]]] | None = None,
    clock: dict | None = None,
) -> dict | None:
    """The ``costs.json`` document: pooled medians (all batches), provenance, per-batch figures; None if empty.

    ``by_batch``: the profiled steps' samples (``samples``); ``clocked``: the
    unprofiled host-clock pass's (``bench/host_clock.py``), whose ``issue.*``
    figures are the ones loaded; ``clock``: that pass's ``provenance()``.
    ``source`` may carry ``machine`` and ``model_shape``, which go to the top.
    """
    clocked, clock = clocked or {}, dict(clock or {})
    how = clock.pop("method", {})
    pool: dict[str, list[float]] = {}
    for s in by_batch.values():
        merge(pool, s)
    hpool: dict[str, list[float]] = {}
    for s in clocked.values():
        merge(hpool, s)
    if not any(pool.values()) and not any(hpool.values()):
        return None
    doc = _document(pool, hpool, how)
    source = dict(source)
    for key in ("machine", "model_shape"):
        if key in source:
            doc[key] = source.pop(key)
    doc["source"] = source
    doc["methods"] = dict(METHODS)
    doc["host_clock"] = {"calls": how, "repeats": clock.get("repeats")} if clocked else {}
    doc["not_measured"] = clock.get("not_measured", {})
    doc["by_batch"] = {
        str(b): _document(by_batch.get(b, {}), clocked.get(b, {}), how)
        for b in sorted(set(by_batch) | set(clocked))
        if any(by_batch.get(b, {}).values()) or any(clocked.get(b, {}).values())
    }
    return doc
