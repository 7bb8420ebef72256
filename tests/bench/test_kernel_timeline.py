"""Kernel-level boundary figures from a synthetic Chrome trace with known gaps."""

import json

import pytest

from specgen.bench import kernel_timeline as kt
from specgen.bench.boundary_terms import boundary_terms

FORWARD = ["embed", "gemm", "attn", "gemm", "lm_head"]


def _x(cat, name, ts, dur, corr=None, tid=1):
    e = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": tid}
    if corr is not None:
        e["args"] = {"correlation": corr}
    return e


def _trace(steps=3, head=2.0, d2v_idle=5.0, v2d=30.0, draft_kernels=3):
    """``steps`` decode steps: a draft graph, then a verify graph (head kernel + forward)."""
    ev, t, corr = [], 1000.0, 1
    expect = []
    for k in range(steps):
        # draft phase: one graph launch on the host, its kernels on the device
        ev.append(_x("user_annotation", kt.phase_name("draft", k), t, 8.0))
        ev.append(_x("cuda_runtime", "cudaGraphLaunch", t + 1, 3, corr))
        dev = t + 10
        for j in range(draft_kernels):
            ev.append(_x("kernel", f"draft_{j}", dev, 4.0, corr))
            dev += 5.0
        draft_end = dev - 1.0
        corr += 1
        # verify phase: another launch; the head kernel, then the forward
        ev.append(_x("user_annotation", kt.phase_name("verify", k), t + 9, 6.0))
        ev.append(_x("cuda_runtime", "cudaGraphLaunch", t + 10, 3, corr))
        dev = draft_end + d2v_idle
        ev.append(_x("kernel", "spec_head_w4", dev, head, corr))
        dev += head
        fwd_start = dev
        for name in FORWARD:
            ev.append(_x("kernel", name, dev, 10.0, corr))
            dev += 10.0
        ev.append(_x("kernel", "greedy_verify", dev, 1.0, corr))
        fwd_end = dev
        corr += 1
        expect.append((fwd_start - draft_end, head, fwd_end))
        t = fwd_end + v2d - 10  # the next draft launches so its first kernel starts at fwd_end + v2d
    return {"traceEvents": ev}, expect


def test_figures_recover_the_constructed_gaps(tmp_path):
    trace, expect = _trace(steps=4, head=2.5, d2v_idle=7.0, v2d=40.0)
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(trace))
    events = kt.load_trace(path)
    steps = kt.attribute(events)
    assert sorted(steps) == [0, 1, 2, 3]
    assert [r.name for r in steps[0].draft] == ["draft_0", "draft_1", "draft_2"]
    figs = kt.step_figures(steps, FORWARD)
    for k, (d2v, head, _) in enumerate(expect):
        assert figs[k]["kernel_draft_to_verify_us"] == pytest.approx(d2v)
        assert figs[k]["head_us"] == pytest.approx(head)
    for k in range(3):
        assert figs[k]["kernel_verify_to_draft_us"] == pytest.approx(40.0)
    assert figs[3]["kernel_verify_to_draft_us"] is None  # no following step
    s = kt.summarize(figs)
    assert s["kernel_draft_to_verify_us"] == pytest.approx(9.5)
    assert s["head_us"] == pytest.approx(2.5)


def test_forward_not_found_gives_none():
    trace, _ = _trace(steps=2)
    figs = kt.step_figures(kt.attribute(kt.load_trace(trace)), ["no_such_kernel"])
    assert all(f["kernel_draft_to_verify_us"] is None and f["head_us"] is None for f in figs)
    assert kt.summarize(figs)["head_us"] is None


def test_records_outside_phases_are_ignored():
    trace, _ = _trace(steps=2)
    trace["traceEvents"] += [
        _x("cuda_runtime", "cudaLaunchKernel", 1.0, 1.0, 999),
        _x("kernel", "stray", 2.0, 1.0, 999),
    ]
    steps = kt.attribute(kt.load_trace(trace))
    assert all(r.name != "stray" for s in steps.values() for r in s.draft + s.verify)


def test_forward_names_lists_kernels_in_order():
    ev = [_x("kernel", "b", 5.0, 1.0, 1), _x("gpu_memcpy", "Memcpy HtoD", 1.0, 1.0, 1), _x("kernel", "a", 2.0, 1.0, 1)]
    assert kt.forward_names(ev) == ["a", "b"]


def _fused(trace):
    """``trace`` as a fused mode records it: the draft kernels come with the verify phase's graph launch."""
    ev = trace["traceEvents"]
    launches = [e for e in ev if e["name"] == "cudaGraphLaunch"]
    draft_corr = {
        launches[i]["args"]["correlation"]: launches[i + 1]["args"]["correlation"] for i in range(0, len(launches), 2)
    }
    out = []
    for e in ev:
        corr = (e.get("args") or {}).get("correlation")
        if e["name"] == "cudaGraphLaunch" and corr in draft_corr:
            continue  # the draft phase launches nothing
        if e["cat"] in kt.DEVICE_CATS and corr in draft_corr:
            e = dict(e, args={"correlation": draft_corr[corr]})
        out.append(e)
    return {"traceEvents": out}


def test_a_fused_draft_is_found_inside_the_verify_phase():
    trace, expect = _trace(steps=3, head=2.0, d2v_idle=1.5, v2d=20.0)
    draft = kt.phase_signature(kt.attribute(kt.load_trace(trace)))
    assert draft == ["draft_0", "draft_1", "draft_2"]
    fused = kt.load_trace(_fused(trace))
    unsplit = kt.attribute(fused)
    assert all(not s.draft for s in unsplit.values())  # without the names the draft hides in the verify phase
    assert all(f["kernel_draft_to_verify_us"] is None for f in kt.step_figures(unsplit, FORWARD))
    steps = kt.attribute(fused, draft)
    assert [r.name for r in steps[1].draft] == draft
    assert all(not r.name.startswith("draft_") for s in steps.values() for r in s.verify)
    figs = kt.step_figures(steps, FORWARD)
    for k, (d2v, head, _) in enumerate(expect):
        assert figs[k]["kernel_draft_to_verify_us"] == pytest.approx(d2v)
        assert figs[k]["head_us"] == pytest.approx(head)
    assert figs[0]["kernel_verify_to_draft_us"] == pytest.approx(20.0)
    # a step whose verify phase lacks the draft's sequence is left as it was
    assert not kt.attribute(fused, ["draft_0", "no_such_kernel"])[0].draft


def test_a_draft_signature_matches_copies_of_either_kind():
    """The draft's hand-over copies are memcpy nodes in one capture and copy kernels in another: both are COPY."""
    trace, expect = _trace(steps=2, head=2.0, d2v_idle=3.0, v2d=20.0)
    ev = trace["traceEvents"]
    for e in ev:  # the bare draft graph: its last record is a memcpy
        if e["cat"] == "kernel" and e["name"] == "draft_2":
            e.update(cat="gpu_memcpy", name="Memcpy DtoD (Device -> Device)")
    draft = kt.phase_signature(kt.attribute(kt.load_trace(trace)))
    assert draft == ["draft_0", "draft_1", kt.COPY]
    fused = _fused(trace)
    for e in fused["traceEvents"]:  # the fused graph copies with a kernel instead
        if e["name"].startswith("Memcpy"):
            e.update(cat="kernel", name="void at::native::direct_copy_kernel_cuda<int>")
    steps = kt.attribute(kt.load_trace(fused), draft)
    assert [r.name for r in steps[0].draft][-1].startswith("void at::native::direct_copy")
    figs = kt.step_figures(steps, FORWARD)
    assert [f["kernel_draft_to_verify_us"] for f in figs] == pytest.approx([d for d, _, _ in expect])


def test_a_draft_signature_is_matched_without_its_leading_copies():
    """The carry copies that open the draft graph run before the fork in a fused graph, on another stream."""
    trace, expect = _trace(steps=2, head=2.0, d2v_idle=3.0, v2d=20.0)
    steps = kt.attribute(kt.load_trace(_fused(trace)), [kt.COPY, kt.COPY, "draft_0", "draft_1", "draft_2"])
    assert [r.name for r in steps[1].draft] == ["draft_0", "draft_1", "draft_2"]
    assert kt.step_figures(steps, FORWARD)[0]["kernel_draft_to_verify_us"] == pytest.approx(expect[0][0])
    assert not kt.attribute(kt.load_trace(_fused(trace)), [kt.COPY])[0].draft  # nothing but copies: no draft


def test_a_multi_tensor_copy_kernel_is_a_copy():
    """The MTP carry is one ``torch._foreach_copy_`` kernel: a leading copy of the draft's signature, not a draft
    kernel the fused step graph would have to show in the draft's own stream."""
    rec = lambda name, cat="kernel": kt.DeviceRecord(name, cat, 0.0, 1.0, None, 7)  # noqa: E731
    foreach = (  # as torch 2.11's profiler names it on the H200
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
        "TensorListMetadata<2>, at::native::(anonymous namespace)::UnaryOpFunctor<int, 2, 1, 1>, "
        "at::native::Copy<int, int> >(at::native::(anonymous namespace)::TensorListMetadata<2>, "
        "at::native::(anonymous namespace)::UnaryOpFunctor<int, 2, 1, 1>, at::native::Copy<int, int>)"
    )
    assert kt.draft_signature([rec(foreach), rec("draft_0")]) == [kt.COPY, "draft_0"]
    other = foreach.replace("native::Copy<", "native::Exp<")  # a foreach exp is work, not a copy
    assert kt.draft_signature([rec(other)]) == [other]
    trace, expect = _trace(steps=2, head=2.0, d2v_idle=3.0, v2d=20.0)
    steps = kt.attribute(
        kt.load_trace(_fused(trace)), kt.draft_signature([rec(foreach)]) + ["draft_0", "draft_1", "draft_2"]
    )
    assert [r.name for r in steps[1].draft] == ["draft_0", "draft_1", "draft_2"]
    assert kt.step_figures(steps, FORWARD)[0]["kernel_draft_to_verify_us"] == pytest.approx(expect[0][0])


def _boundary_trace(behind_copies=False, sync=False, in_graph_pack=False):
    """Two steps of a fused step graph with the verify->draft work outside the plan at known times (us).

    Step 0's graph (correlation 1) ends its forward at 100, then a casting copy 100.5-101.5 and the tail
    103-106; the host launched a pack (correlation 2) after the replay: 107-108.5.  Step 1's graph
    (correlation 3, launched at 20, long before) opens with the carry at 110.5 (after a memcpy node at
    110.5 when ``behind_copies``) and its draft's first kernel at 114.5 (122.5 behind copies).  ``sync``:
    the host synchronizes in step 0's verify phase, returning at 109.  ``in_graph_pack``: no casting copy, and
    the pack is a multi-tensor copy kernel of step 0's graph, 106.5-108, not a launch after the replay.
    """
    ev = [
        _x("user_annotation", kt.phase_name("verify", 0), 0.0, 150.0 if sync else 15.0),
        _x("cuda_runtime", "cudaGraphLaunch", 1.0, 3.0, 1),
        _x("kernel", "spec_head_w4", 10.0, 2.0, 1),
    ]
    t = 20.0
    for name in FORWARD:
        ev.append(_x("kernel", name, t, 16.0, 1))
        t += 16.0
    if in_graph_pack:
        pack = "void at::native::multi_tensor_apply_kernel<at::native::Copy<int, int>>"
        ev += [_x("kernel", "spec_verify_tail_update", 103.0, 3.0, 1), _x("kernel", pack, 106.5, 1.5, 1)]
    else:
        ev += [
            _x("kernel", "void at::native::unrolled_elementwise_kernel<direct_copy_kernel_cuda>", 100.5, 1.0, 1),
            _x("kernel", "spec_verify_tail_update", 103.0, 3.0, 1),
            _x("cuda_runtime", "cudaLaunchKernel", 6.0, 4.0, 2),
            _x("kernel", "CatArrayBatchedCopy", 107.0, 1.5, 2),
        ]
    if sync:
        ev.append(_x("cuda_runtime", "cudaStreamSynchronize", 10.0, 99.0))
    ev += [
        _x("user_annotation", kt.phase_name("draft", 1), 160.0 if sync else 16.0, 1.0),
        _x("user_annotation", kt.phase_name("verify", 1), 161.0 if sync else 18.0, 5.0),
        _x("cuda_runtime", "cudaGraphLaunch", 162.0 if sync else 20.0, 3.0, 3),
    ]
    draft_at = 114.5
    if behind_copies:
        ev.append(_x("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 110.5, 1.0, 3))
        draft_at = 122.5
    ev.append(_x("kernel", "void at::native::direct_copy_kernel_cuda", draft_at - 4.0, 1.0, 3, tid=2))
    for j in range(3):
        ev.append(_x("kernel", f"draft_{j}", draft_at + 5.0 * j, 4.0, 3, tid=2))
    t = draft_at + 20.0
    for name in FORWARD:
        ev.append(_x("kernel", name, t, 16.0, 3))
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
    trace, _ = _trace(steps=3, head=2.0, d2v_idle=7.0)
    ev = kt.load_trace(trace)
    assert boundary_terms(ev, kt.attribute(ev), FORWARD)["draft_handover"] == [7.0, 7.0, 7.0]
    first_head = next(e for e in ev if e["name"] == "spec_head_w4")
    corr = first_head["args"]["correlation"]  # step 0's step graph: a hoisted record ending before the draft does
    hoisted = _x("kernel", "spec_hoisted", first_head["ts"] - 12.0, 1.0, corr, tid=7)
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


def test_a_pack_inside_the_step_graph_is_its_own_term():
    ev = _boundary_trace(in_graph_pack=True)
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


PROJECTION = ["fc", "norm", "k_proj", "kv_write"]


def _block_trace(steps=3, projection_gap=0.5, tail_gap=1.0, switch=4.0, side=None, tail_tid=1):
    """Block-draft steps: the draft graph, then the step graph (forward; a tail kernel; the context projection,
    ``projection_gap`` us between its kernels; next-block inputs), ``switch`` us before the next draft.
    ``side``: (start after the forward's end, duration) of a record on another stream inside the gap."""
    ev, t, corr, expect = [], 1000.0, 1, []
    for k in range(steps):
        ev.append(_x("user_annotation", kt.phase_name("draft", k), t, 8.0))
        ev.append(_x("cuda_runtime", "cudaGraphLaunch", t + 1, 3, corr))
        dev = t + 10
        for j in range(2):
            ev.append(_x("kernel", f"draft_{j}", dev, 4.0, corr))
            dev += 5.0
        corr += 1
        ev.append(_x("user_annotation", kt.phase_name("verify", k), t + 9, 6.0))
        ev.append(_x("cuda_runtime", "cudaGraphLaunch", t + 10, 3, corr))
        for name in FORWARD:
            ev.append(_x("kernel", name, dev, 10.0, corr))
            dev += 10.0
        fwd_end = dev
        ev.append(_x("kernel", "context_tail", dev + tail_gap, 2.0, corr, tid=tail_tid))
        dev += tail_gap + 2.0 + tail_gap
        first = dev
        for name in PROJECTION:
            ev.append(_x("kernel", name, dev, 3.0, corr, tid=tail_tid))
            dev += 3.0 + projection_gap
        dev -= projection_gap
        span = dev - first
        ev.append(_x("kernel", "next_block_inputs", dev + tail_gap, 1.5, corr, tid=tail_tid))
        dev += tail_gap + 1.5
        if side is not None:
            ev.append(_x("kernel", "side_work", fwd_end + side[0], side[1], corr, tid=2))
        corr += 1
        expect.append({"gap": dev + switch - fwd_end, "span": span, "busy": 2.0 + span + 1.5})
        t = dev + switch - 10
    return {"traceEvents": ev}, expect


def test_the_draft_s_own_post_verify_work_is_taken_out_of_the_gap():
    trace, expect = _block_trace(steps=4, projection_gap=0.5, tail_gap=1.0, switch=4.0)
    steps = kt.attribute(kt.load_trace(trace))
    figs = kt.step_figures(steps, FORWARD, PROJECTION)
    for f, e in zip(figs[:3], expect):
        assert f["kernel_verify_to_draft_us"] == pytest.approx(e["gap"])
        assert f["projection_us"] == pytest.approx(e["span"]) == pytest.approx(4 * 3.0 + 3 * 0.5)
        # outside the projection: the tail kernel and the next-block inputs with their gaps, and the switch
        assert f["kernel_post_verify_us"] == pytest.approx(1.0 + 2.0 + 1.0 + 1.0 + 1.5 + 4.0)
        # idle: the gaps around the tail and the next-block inputs, inside the projection, and the switch
        assert f["post_verify_idle_us"] == pytest.approx(3 * 1.0 + 3 * 0.5 + 4.0)
    assert figs[3]["kernel_verify_to_draft_us"] is None and figs[3]["kernel_post_verify_us"] is None
    medians = kt.summarize(figs)
    assert medians["kernel_post_verify_us"] == pytest.approx(10.5) and medians["projection_us"] == pytest.approx(13.5)
    # without the projection's names the figures are the three of old, and summarize lists only those
    assert set(kt.summarize(kt.step_figures(steps, FORWARD))) == set(kt.STEP_FIGURES[:3])


def test_post_verify_idle_counts_other_streams_as_busy():
    # the switch runs from the forward's end + 20 us to + 24 us; a side-stream record from + 21 us for 2 us hides
    # half of it
    trace, expect = _block_trace(steps=2, tail_gap=1.0, switch=4.0, side=(21.0, 2.0))
    f = kt.step_figures(kt.attribute(kt.load_trace(trace)), FORWARD, PROJECTION)[0]
    assert expect[0]["gap"] == pytest.approx(24.0)
    assert f["post_verify_idle_us"] == pytest.approx(3 * 1.0 + 3 * 0.5 + 2.0)
    assert f["kernel_post_verify_us"] == pytest.approx(24.0 - 13.5)  # the gap outside the projection is unchanged


def test_a_projection_not_in_the_step_leaves_its_figures_empty():
    trace, _ = _block_trace(steps=2)
    f = kt.step_figures(kt.attribute(kt.load_trace(trace)), FORWARD, ["fc", "no_such_kernel"])[0]
    assert f["kernel_verify_to_draft_us"] is not None
    assert f["projection_us"] is None and f["kernel_post_verify_us"] is None
    assert f["post_verify_idle_us"] is not None  # the idle needs no projection


def test_post_verify_figures_come_back_from_the_saved_trace(tmp_path):
    """A saved trace keeps the projection's kernel names: its figures are recomputed from the file alone."""
    from specgen.bench.profiler import figures, read_trace, trace_projection, write_trace

    trace, _ = _block_trace(steps=3)
    path = tmp_path / "traces" / "trace_specgen_d3_b1.json.gz"
    write_trace(path, trace, FORWARD, {"mode": "specgen", "depth": 3, "batch": 1}, [], PROJECTION)
    events, forward, draft = read_trace(path)
    assert forward == FORWARD and trace_projection(path) == PROJECTION
    again = kt.summarize(kt.step_figures(kt.attribute(events, draft), forward, trace_projection(path)))
    assert again == {k: v for k, v in figures(trace, FORWARD, [], PROJECTION).items() if k in again}
    assert again["kernel_post_verify_us"] == pytest.approx(1.0 + 2.0 + 1.0 + 1.0 + 1.5 + 4.0)


def test_a_sampled_step_reports_its_vocabulary_pass_device_time():
    """``vocab_kernel_us``: the vocabulary pass's kernels (by name) summed per step, the median over the steps;
    a greedy run, which launches none, has no such figure."""
    from specgen.bench.profiler import figures

    trace, _ = _trace(steps=3)
    assert "vocab_kernel_us" not in figures(trace, FORWARD)
    ev = trace["traceEvents"]
    greedy = [e for e in ev if e["name"] == "greedy_verify"]
    for k, e in enumerate(greedy):  # each step's vocabulary pass after its forward, in the verify graph
        corr = e["args"]["correlation"]
        ev.append(_x("kernel", "spec_target_sample_kernel", e["ts"] + 1.0, 20.0 + k, corr))
        if k == 1:  # and a sampling draft's pass in one step
            ev.append(_x("kernel", "spec_draft_sample_kernel", e["ts"] + 22.0, 6.0, corr))
    assert figures(trace, FORWARD)["vocab_kernel_us"] == pytest.approx(22.0)  # 20, 27 and 22 us: the median


def test_a_projection_on_another_stream_than_the_forward_is_found():
    """In the captured step graph the tail and the context projection ran on the capture stream, the forward on
    another (the H200 trace of the tiny DFlash and DSpark runs): the projection is looked for on every stream."""
    trace, expect = _block_trace(steps=3, tail_tid=2)
    figs = kt.step_figures(kt.attribute(kt.load_trace(trace)), FORWARD, PROJECTION)
    for k in range(2):
        assert figs[k]["projection_us"] == pytest.approx(expect[k]["span"])
        assert figs[k]["kernel_post_verify_us"] == pytest.approx(expect[k]["gap"] - expect[k]["span"])
