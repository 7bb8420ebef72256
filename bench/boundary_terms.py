"""What the runtime does at a boundary outside the boundary's plan, measured from a kernel trace.

``boundary_terms(events, steps, forward)`` splits each profiled step's
verify->draft gap into ``BOUNDARY_TERMS``, and takes from its draft->verify gap
the device's hand-over from the draft to the verify (``draft_handover``): figures
the cost model adds to the planned bubble (``specgen plan --compare``; the
bench's ``costs.json`` keeps them under ``boundary``).
"""

from __future__ import annotations

import bisect

from .kernel_timeline import LAUNCH_CATS, StepKernels, _is_copy, _phases, forward_span

__all__ = ["BOUNDARY_TERMS", "SYNC_CALLS", "boundary_terms"]

# What the runtime does at verify->draft outside the boundary's plan, as measured from the device records
# (and, for the read-back, the host's synchronizing call).  Each is one step's figure in microseconds.
BOUNDARY_TERMS = {
    "cast": "device time of the copy kernels the step graph runs right after the forward (the casting copy "
    "of the forward's argmax into target_tokens; a sampling engine's copy of its logits), before its first "
    "other kernel",
    "graph_tail": "from the forward's last kernel to the end of the step graph's last record after it on the "
    "forward's stream that is not a trailing copy (the verify tail's kernels as they ran, casting copies included)",
    "graph_pack": "from the end of the step graph's last other record after the forward, on the forward's "
    "stream, to the end of the copy records after it in the graph (the host-field pack inside the step graph)",
    "after_replay": "from the step graph's last record on the forward's stream to the end of the records the "
    "host launched on that stream after the replay (a stream wait and the host-field pack)",
    "pack_kernel": "device time of the kernels the host launched on the forward's stream after the replay",
    "graph_switch": "from the end of that work to the next step's first draft record, where the next step's "
    "graph launch call had returned before that work ended and no memcpy node of the next graph ran first",
    "graph_switch_behind_copies": "the same gap in steps whose next graph ran a memcpy node (copy engine) "
    "before its first draft record",
    "draft_handover": "draft->verify: from the end of the step's last draft record to the start of its first "
    "verify record after it, where the call that launched that record had returned before the draft ended (the "
    "device's hand-over: the switch from the draft's graph to the step graph, or in one graph the wait of the "
    "verify's stream for the draft's)",
    "read_back": "from the return of the last synchronizing call of the verify phase (the host reading the "
    "step's result back) to the next step's first draft record",
    "read_back_launch": "in those steps, from the return of the call that launched the next step's first draft "
    "record to that record's start (the device's part of the read-back's turnaround)",
}
SYNC_CALLS = frozenset({"cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize", "cudaMemcpy"})


def boundary_terms(events: list[dict], steps: dict[int, StepKernels], forward: list) -> dict[str, list[float]]:
    """Per ``BOUNDARY_TERMS`` key, one figure per step that has it (us), from ``attribute``'s ``steps``.

    The step graph is the graph replay that ran the forward (the forward's
    last kernel's correlation id); the work after the replay is the verify
    phase's records launched by other calls, after the graph's last record,
    on the stream that ran that record (the forward's, unless the replay ran
    the tail on another).  A term a step lacks (no records after
    the replay, no host-early next graph, no synchronizing call) is left out
    for that step.
    """
    calls = {}
    syncs = []
    for e in events:
        if e.get("cat") not in LAUNCH_CATS:
            continue
        corr = (e.get("args") or {}).get("correlation")
        end = float(e["ts"]) + float(e.get("dur", 0.0))
        if corr is not None:
            calls[corr] = end
        if e.get("name") in SYNC_CALLS:
            syncs.append(end)
    syncs.sort()
    phases = {(p, k): (lo, hi) for lo, hi, p, k in _phases(events)}
    out: dict[str, list[float]] = {}
    add = lambda key, us: out.setdefault(key, []).append(round(us, 3))  # noqa: E731
    keys = list(steps)
    for k, step in enumerate(keys):
        s, nxt = steps[step], steps.get(keys[k + 1]) if k + 1 < len(keys) else None
        tail = max(s.draft, key=lambda r: r.end, default=None)
        later = [r for r in s.verify if tail is not None and r.start >= tail.end]
        if later:  # verify work hoisted to run beside the draft is not the switch: the first record after it is
            head = min(later, key=lambda r: r.start)
            launched = calls.get(head.correlation)
            if launched is not None and launched < tail.end:
                add("draft_handover", head.start - tail.end)
        found = forward_span(s.verify, forward)
        if found is None:
            continue
        last = found[1]
        # the stream of the graph's last record after the forward (a replay may run the tail on another stream)
        mine = [r for r in s.verify if r.start >= last.end and r.correlation == last.correlation is not None]
        stream = max(mine, key=lambda r: r.end).stream if mine else last.stream
        lane = sorted((r for r in s.verify if r.stream == stream and r.start >= last.end), key=lambda r: r.start)
        graph = [r for r in lane if last.correlation is not None and r.correlation == last.correlation]
        cast = 0.0
        for r in graph:
            if not _is_copy(r):
                break
            cast += r.dur
        if graph and cast:
            add("cast", cast)
        trailing = 0
        while trailing < len(graph) and _is_copy(graph[len(graph) - 1 - trailing]):
            trailing += 1
        if trailing < len(graph):  # the tail's kernels, then the copies after them: the pack in the graph
            work = graph[len(graph) - 1 - trailing]
            add("graph_tail", work.end - last.end)
            if trailing:
                add("graph_pack", max(r.end for r in graph[len(graph) - trailing :]) - work.end)
        graph_end = max((r.end for r in graph), default=last.end)
        after = [r for r in lane if r.correlation != last.correlation and r.start >= graph_end]
        if nxt is not None and nxt.draft:
            first_draft = min(r.start for r in nxt.draft)
            after = [r for r in after if r.start < first_draft]
        work_end = max((r.end for r in after), default=graph_end)
        if after:
            add("after_replay", work_end - graph_end)
            add("pack_kernel", sum(r.dur for r in after))
        if nxt is None or not nxt.draft:
            continue
        first = min(nxt.draft, key=lambda r: r.start)
        launched = calls.get(first.correlation)
        if launched is not None and launched < work_end:  # the host was ahead: the device gap is the switch
            ahead = [
                r
                for r in nxt.draft + nxt.verify
                if r.correlation == first.correlation and r.start < first.start and r.cat == "gpu_memcpy"
            ]
            add("graph_switch_behind_copies" if ahead else "graph_switch", first.start - work_end)
        lo, hi = phases.get(("verify", step), (None, None))
        if lo is not None:
            i = bisect.bisect_right(syncs, hi) - 1
            if i >= 0 and lo <= syncs[i] and last.end <= syncs[i] <= first.start:
                add("read_back", first.start - syncs[i])
                if launched is not None and syncs[i] <= launched <= first.start:
                    add("read_back_launch", first.start - launched)
    return out
