"""Kernel-level boundary figures from a synthetic Chrome trace with known gaps."""

import json

import pytest
from oracles.kernel_traces import FORWARD, event, steps_trace

from specgen.bench import kernel_timeline as kt


def test_figures_recover_the_constructed_gaps(tmp_path):
    trace, expect = steps_trace(steps=4, head=2.5, d2v_idle=7.0, v2d=40.0)
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
    trace, _ = steps_trace(steps=2)
    figs = kt.step_figures(kt.attribute(kt.load_trace(trace)), ["no_such_kernel"])
    assert all(f["kernel_draft_to_verify_us"] is None and f["head_us"] is None for f in figs)
    assert kt.summarize(figs)["head_us"] is None


def test_records_outside_phases_are_ignored():
    trace, _ = steps_trace(steps=2)
    trace["traceEvents"] += [
        event("cuda_runtime", "cudaLaunchKernel", 1.0, 1.0, 999),
        event("kernel", "stray", 2.0, 1.0, 999),
    ]
    steps = kt.attribute(kt.load_trace(trace))
    assert all(r.name != "stray" for s in steps.values() for r in s.draft + s.verify)


def test_forward_names_lists_kernels_in_order():
    ev = [
        event("kernel", "b", 5.0, 1.0, 1),
        event("gpu_memcpy", "Memcpy HtoD", 1.0, 1.0, 1),
        event("kernel", "a", 2.0, 1.0, 1),
    ]
    assert kt.forward_names(ev) == ["a", "b"]


def test_forward_names_keep_the_main_stream_of_a_forked_forward():
    """A forward that forks work to a side stream (a block draft's context rows beside its later layers): the
    names are the main stream's, however the two streams interleave in time."""
    ev = [event("kernel", f"layer{i}", 10.0 * i, 8.0, 1, tid=7) for i in range(5)]
    ev += [event("kernel", "fc_gemm", 21.0, 3.0, 1, tid=9), event("kernel", "kv_gemm", 25.0, 3.0, 1, tid=9)]
    assert kt.forward_names(ev) == [f"layer{i}" for i in range(5)]
    tie = [event("kernel", "x", 5.0, 1.0, 1, tid=3), event("kernel", "y", 1.0, 1.0, 1, tid=4)]
    assert kt.forward_names(tie) == ["y"]  # a tie: the stream that ran a kernel first


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
    trace, expect = steps_trace(steps=3, head=2.0, d2v_idle=1.5, v2d=20.0)
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


def _trailing(trace):
    """``trace`` as a step graph that ends by drafting for the next step records it (``draft_at_end``): after the
    first step the draft phase launches nothing, and each draft's kernels come with the previous verify launch."""
    ev = trace["traceEvents"]
    launches = [e for e in ev if e["name"] == "cudaGraphLaunch"]  # draft 0, verify 0, draft 1, verify 1, ...
    corr = [e["args"]["correlation"] for e in launches]
    owner = {corr[i]: corr[i - 1] for i in range(2, len(corr), 2)}
    out = []
    for e in ev:
        corr = (e.get("args") or {}).get("correlation")
        if e["name"] == "cudaGraphLaunch" and corr in owner:
            continue  # the draft phase launches nothing after the first step
        if e["cat"] in kt.DEVICE_CATS and corr in owner:
            e = dict(e, args={"correlation": owner[corr]})
        out.append(e)
    return {"traceEvents": out}


def test_a_trailing_draft_is_the_next_steps():
    """A draft found after the forward and tail of a verify phase was launched there for the next step: it moves to
    that step's draft, so each step's figures are those of the two-graph trace."""
    trace, expect = steps_trace(steps=3, head=2.0, d2v_idle=6.0, v2d=25.0)
    names = kt.phase_signature(kt.attribute(kt.load_trace(trace)))
    draft = [*names, kt.TRAILS]  # the signature of a draft the step graph runs at its end
    trailing = kt.load_trace(_trailing(trace))
    assert all(not s.draft for k, s in kt.attribute(trailing).items() if k > 0)
    unmarked = kt.attribute(trailing, names)  # without TRAILS a draft found in a step's graph is its prologue
    assert [r.name for r in unmarked[1].draft] == names and not unmarked[2].draft
    steps = kt.attribute(trailing, draft)
    assert all([r.name for r in s.draft] == names for s in steps.values())  # step 0 ran its own draft graph
    assert all(not r.name.startswith("draft_") for s in steps.values() for r in s.verify)
    figs = kt.step_figures(steps, FORWARD)
    assert [f["kernel_draft_to_verify_us"] for f in figs] == pytest.approx([d for d, _, _ in expect])
    assert [f["kernel_verify_to_draft_us"] for f in figs] == pytest.approx([25.0, 25.0, None])
    # the last profiled step's trailing draft belongs to a step that was not profiled: it is dropped
    cut = {"traceEvents": [e for e in _trailing(trace)["traceEvents"] if not e["name"].endswith("#2")]}
    steps = kt.attribute(kt.load_trace(cut), draft)
    assert sorted(steps) == [0, 1] and all([r.name for r in s.draft] == names for s in steps.values())
    assert [r.name for r in steps[1].verify] == ["spec_head_w4", *FORWARD, "greedy_verify"]


def test_a_prologue_after_hoisted_head_kernels_is_its_own_steps():
    """On one stream the hoisted head kernels run before the prologue's draft on the draft's stream: without
    ``TRAILS`` the draft found there is still that step's (and with it, the next step's)."""
    trace, expect = steps_trace(steps=3, head=2.0, d2v_idle=4.0, v2d=20.0)
    draft = kt.phase_signature(kt.attribute(kt.load_trace(trace)))
    fused = _fused(trace)
    for e in fused["traceEvents"]:  # a hoisted head kernel just before each draft, on the same stream
        if e["name"] == "draft_0":
            fused["traceEvents"].append(dict(e, name="spec_verify_metadata_update", ts=e["ts"] - 0.9, dur=0.5))
    steps = kt.attribute(kt.load_trace(fused), draft)
    assert all([r.name for r in s.draft] == draft for s in steps.values())
    figs = kt.step_figures(steps, FORWARD)
    assert [f["kernel_draft_to_verify_us"] for f in figs] == pytest.approx([d for d, _, _ in expect])
    moved = kt.attribute(kt.load_trace(fused), [*draft, kt.TRAILS])
    assert [r.name for r in moved[1].draft] == draft and not moved[0].draft


def test_a_draft_signature_matches_copies_of_either_kind():
    """The draft's hand-over copies are memcpy nodes in one capture and copy kernels in another: both are COPY."""
    trace, expect = steps_trace(steps=2, head=2.0, d2v_idle=3.0, v2d=20.0)
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
    trace, expect = steps_trace(steps=2, head=2.0, d2v_idle=3.0, v2d=20.0)
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
    trace, expect = steps_trace(steps=2, head=2.0, d2v_idle=3.0, v2d=20.0)
    steps = kt.attribute(
        kt.load_trace(_fused(trace)), kt.draft_signature([rec(foreach)]) + ["draft_0", "draft_1", "draft_2"]
    )
    assert [r.name for r in steps[1].draft] == ["draft_0", "draft_1", "draft_2"]
    assert kt.step_figures(steps, FORWARD)[0]["kernel_draft_to_verify_us"] == pytest.approx(expect[0][0])


PROJECTION = ["fc", "norm", "k_proj", "kv_write"]


def _block_trace(steps=3, projection_gap=0.5, tail_gap=1.0, switch=4.0, side=None, tail_tid=1):
    """Block-draft steps: the draft graph, then the step graph (forward; a tail kernel; the context projection,
    ``projection_gap`` us between its kernels; next-block inputs), ``switch`` us before the next draft.
    ``side``: (start after the forward's end, duration) of a record on another stream inside the gap."""
    ev, t, corr, expect = [], 1000.0, 1, []
    for k in range(steps):
        ev.append(event("user_annotation", kt.phase_name("draft", k), t, 8.0))
        ev.append(event("cuda_runtime", "cudaGraphLaunch", t + 1, 3, corr))
        dev = t + 10
        for j in range(2):
            ev.append(event("kernel", f"draft_{j}", dev, 4.0, corr))
            dev += 5.0
        corr += 1
        ev.append(event("user_annotation", kt.phase_name("verify", k), t + 9, 6.0))
        ev.append(event("cuda_runtime", "cudaGraphLaunch", t + 10, 3, corr))
        for name in FORWARD:
            ev.append(event("kernel", name, dev, 10.0, corr))
            dev += 10.0
        fwd_end = dev
        ev.append(event("kernel", "context_tail", dev + tail_gap, 2.0, corr, tid=tail_tid))
        dev += tail_gap + 2.0 + tail_gap
        first = dev
        for name in PROJECTION:
            ev.append(event("kernel", name, dev, 3.0, corr, tid=tail_tid))
            dev += 3.0 + projection_gap
        dev -= projection_gap
        span = dev - first
        ev.append(event("kernel", "next_block_inputs", dev + tail_gap, 1.5, corr, tid=tail_tid))
        dev += tail_gap + 1.5
        if side is not None:
            ev.append(event("kernel", "side_work", fwd_end + side[0], side[1], corr, tid=2))
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

    trace, _ = steps_trace(steps=3)
    assert "vocab_kernel_us" not in figures(trace, FORWARD)
    ev = trace["traceEvents"]
    greedy = [e for e in ev if e["name"] == "greedy_verify"]
    for k, e in enumerate(greedy):  # each step's vocabulary pass after its forward, in the verify graph
        corr = e["args"]["correlation"]
        ev.append(event("kernel", "spec_target_sample_kernel", e["ts"] + 1.0, 20.0 + k, corr))
        if k == 1:  # and a sampling draft's pass in one step
            ev.append(event("kernel", "spec_draft_sample_kernel", e["ts"] + 22.0, 6.0, corr))
    assert figures(trace, FORWARD)["vocab_kernel_us"] == pytest.approx(22.0)  # 20, 27 and 22 us: the median


def test_a_projection_on_another_stream_than_the_forward_is_found():
    """In the captured step graph the tail and the context projection ran on the capture stream, the forward on
    another (the H200 trace of the tiny DFlash and DSpark runs): the projection is looked for on every stream."""
    trace, expect = _block_trace(steps=3, tail_tid=2)
    figs = kt.step_figures(kt.attribute(kt.load_trace(trace)), FORWARD, PROJECTION)
    for k in range(2):
        assert figs[k]["projection_us"] == pytest.approx(expect[k]["span"])
        assert figs[k]["kernel_post_verify_us"] == pytest.approx(expect[k]["gap"] - expect[k]["span"])


@pytest.mark.parametrize("run", ["bench_dflash", "bench_dspark"])
def test_the_recorded_trailing_block_drafts_give_their_figures_back(run):
    """The block drafts of the 314ce70 sweep ran at the end of specgen's step graph: their traces, read with the
    draft's signature marked ``TRAILS``, give back every kernel-level figure the bench recorded (their traces
    predate the mark, so it is added here)."""
    import gzip
    from pathlib import Path

    import specgen
    from specgen.bench.profiler import figures

    folder = Path(specgen.__file__).parent / "benchmarks/results/performance/sweep_314ce70_h100" / run
    runs = {r["batch"]: r for r in json.loads((folder / "bench.json").read_text())["runs"] if r["mode"] == "specgen"}
    paths = sorted((folder / "traces").glob("trace_specgen_*.json.gz"))
    assert len(paths) == len(runs) == 3, (paths, sorted(runs))  # one trace a batch, none missing
    for path in paths:
        data = json.loads(gzip.decompress(path.read_bytes()))
        names = data["specgen"]
        fig = figures(data, names["forward_kernels"], [*names["draft_kernels"], kt.TRAILS], names["projection_kernels"])
        row = runs[names["batch"]]
        for key in ("kernel_draft_to_verify_us", "kernel_verify_to_draft_us", "post_verify_idle_us", "projection_us"):
            assert fig[key] == pytest.approx(row[key], abs=1e-6), (path.name, key)
        assert fig["post_verify_idle_us"] < 5.0  # issue 25's goal
