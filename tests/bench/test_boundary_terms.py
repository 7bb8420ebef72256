"""``bench/boundary_terms.py``: the verify->draft gap split into the work outside the plan (the casting copy, the
pack, the switch, the read-back) and draft->verify's hand-over, each at known times in a synthetic trace."""

from __future__ import annotations

import pytest
from oracles.kernel_traces import FORWARD, event, steps_trace

from specgen.bench import kernel_timeline as kt
from specgen.bench.boundary_terms import boundary_terms


def _boundary_trace(behind_copies=False, sync=False, in_graph_pack=False, tail_tid=1):
    """Two steps of a fused step graph with the verify->draft work outside the plan at known times (us).

    Step 0's graph (correlation 1) ends its forward at 100, then a casting copy 100.5-101.5 and the tail
    103-106; the host launched a pack (correlation 2) after the replay: 107-108.5.  Step 1's graph
    (correlation 3, launched at 20, long before) opens with the carry at 110.5 (after a memcpy node at
    110.5 when ``behind_copies``) and its draft's first kernel at 114.5 (122.5 behind copies).  ``sync``:
    the host synchronizes in step 0's verify phase, returning at 109.  ``in_graph_pack``: no casting copy, and
    the pack is a multi-tensor copy kernel of step 0's graph, 106.5-108, not a launch after the replay.
    ``tail_tid``: the stream the replay ran that tail and pack on.
    """
    ev = [
        event("user_annotation", kt.phase_name("verify", 0), 0.0, 150.0 if sync else 15.0),
        event("cuda_runtime", "cudaGraphLaunch", 1.0, 3.0, 1),
        event("kernel", "spec_head_w4", 10.0, 2.0, 1),
    ]
    t = 20.0
    for name in FORWARD:
        ev.append(event("kernel", name, t, 16.0, 1))
        t += 16.0
    if in_graph_pack:
        pack = "void at::native::multi_tensor_apply_kernel<at::native::Copy<int, int>>"
        ev += [
            event("kernel", "spec_verify_tail_update", 103.0, 3.0, 1, tid=tail_tid),
            event("kernel", pack, 106.5, 1.5, 1, tid=tail_tid),
        ]
    else:
        ev += [
            event("kernel", "void at::native::unrolled_elementwise_kernel<direct_copy_kernel_cuda>", 100.5, 1.0, 1),
            event("kernel", "spec_verify_tail_update", 103.0, 3.0, 1),
            event("cuda_runtime", "cudaLaunchKernel", 6.0, 4.0, 2),
            event("kernel", "CatArrayBatchedCopy", 107.0, 1.5, 2),
        ]
    if sync:
        ev.append(event("cuda_runtime", "cudaStreamSynchronize", 10.0, 99.0))
    ev += [
        event("user_annotation", kt.phase_name("draft", 1), 160.0 if sync else 16.0, 1.0),
        event("user_annotation", kt.phase_name("verify", 1), 161.0 if sync else 18.0, 5.0),
        event("cuda_runtime", "cudaGraphLaunch", 162.0 if sync else 20.0, 3.0, 3),
    ]
    draft_at = 114.5
    if behind_copies:
        ev.append(event("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 110.5, 1.0, 3))
        draft_at = 122.5
    ev.append(event("kernel", "void at::native::direct_copy_kernel_cuda", draft_at - 4.0, 1.0, 3, tid=2))
    for j in range(3):
        ev.append(event("kernel", f"draft_{j}", draft_at + 5.0 * j, 4.0, 3, tid=2))
    t = draft_at + 20.0
    for name in FORWARD:
        ev.append(event("kernel", name, t, 16.0, 3))
        t += 16.0
    return ev


def test_boundary_terms_split_the_verify_to_draft_gap():
    ev = _boundary_trace()
    steps = kt.attribute(ev, ["draft_0", "draft_1", "draft_2"])
    terms = boundary_terms(ev, steps, FORWARD)
    assert terms["cast"] == [1.0]  # the copy kernel before the tail, not the tail
    assert terms["after_replay"] == [2.5]  # the graph's last record ends at 106, the pack at 108.5
    assert terms["pack_kernel"] == [1.5]
    assert terms["graph_switch"] == [6.0]  # 108.5 -> the draft's first kernel at 114.5, the carry in between
    assert "graph_switch_behind_copies" not in terms and "read_back" not in terms
    # the graph's tail after the forward (100 -> 106: cast, tail, the gaps between), then the two terms after it
    gap = kt.step_figures(steps, FORWARD)[0]["kernel_verify_to_draft_us"]
    assert gap == pytest.approx(6.0 + 2.5 + 6.0)


def test_the_draft_handover_is_the_gap_from_the_draft_to_the_verify():
    """draft->verify's term: the draft's last record to the verify's first record after it (another graph's, or
    the same graph's), when that record's launch had returned in time; hoisted verify work beside the draft is
    skipped, a late launch gives none."""
    trace, _ = steps_trace(steps=3, head=2.0, d2v_idle=7.0)
    ev = kt.load_trace(trace)
    assert boundary_terms(ev, kt.attribute(ev), FORWARD)["draft_handover"] == [7.0, 7.0, 7.0]
    first_head = next(e for e in ev if e["name"] == "spec_head_w4")
    corr = first_head["args"]["correlation"]  # step 0's step graph: a hoisted record ending before the draft does
    hoisted = event("kernel", "spec_hoisted", first_head["ts"] - 12.0, 1.0, corr, tid=7)
    ev2 = kt.load_trace({"traceEvents": trace["traceEvents"] + [hoisted]})
    assert boundary_terms(ev2, kt.attribute(ev2), FORWARD)["draft_handover"] == [7.0, 7.0, 7.0]
    late = [dict(e) for e in trace["traceEvents"]]
    launch = next(e for e in late if e["name"] == "cudaGraphLaunch" and e["args"]["correlation"] == corr)
    launch["ts"] = first_head["ts"] - 2.0  # returned after the draft's end: the host, not the switch
    ev3 = kt.load_trace({"traceEvents": late})
    assert boundary_terms(ev3, kt.attribute(ev3), FORWARD)["draft_handover"] == [7.0, 7.0]
    fused = _boundary_trace()  # step 1's draft runs inside its step graph: the gap to its forward at 134.5
    assert boundary_terms(fused, kt.attribute(fused, ["draft_0", "draft_1", "draft_2"]), FORWARD)["draft_handover"] == [
        6.0
    ]


@pytest.mark.parametrize("tail_tid", [1, 5], ids=["forward-stream", "tail-on-another-stream"])
def test_a_pack_inside_the_step_graph_is_its_own_term(tail_tid):
    ev = _boundary_trace(in_graph_pack=True, tail_tid=tail_tid)
    steps = kt.attribute(ev, ["draft_0", "draft_1", "draft_2"])
    terms = boundary_terms(ev, steps, FORWARD)
    assert terms["graph_pack"] == [2.0]  # the tail ends at 106, the pack at 108
    assert "cast" not in terms and "after_replay" not in terms and "pack_kernel" not in terms
    assert terms["graph_switch"] == [6.5]  # 108 -> the draft's first kernel at 114.5
    gap = kt.step_figures(steps, FORWARD)[0]["kernel_verify_to_draft_us"]
    assert gap == pytest.approx(6.0 + 2.0 + 6.5)  # the tail (100 -> 106), the pack, the switch


def test_a_switch_behind_memcpy_nodes_is_kept_apart():
    ev = _boundary_trace(behind_copies=True)
    terms = boundary_terms(ev, kt.attribute(ev, ["draft_0", "draft_1", "draft_2"]), FORWARD)
    assert terms["graph_switch_behind_copies"] == [14.0] and "graph_switch" not in terms


def test_a_read_back_is_the_turnaround_after_the_sync_and_a_late_launch_no_switch():
    ev = _boundary_trace(sync=True)
    terms = boundary_terms(ev, kt.attribute(ev, ["draft_0", "draft_1", "draft_2"]), FORWARD)
    assert terms["read_back"] == [5.5]  # the sync returns at 109, the draft starts at 114.5
    assert "graph_switch" not in terms  # the next graph was launched after the work before it ended
