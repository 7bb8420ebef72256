"""Kernel-level bench figures, capture time and long prompts: the config, the engine's marks, traces, the picture."""

from __future__ import annotations

import json
import random
import statistics

import pytest
import torch

from specgen.bench import kernel_timeline as kt

FORWARD = ["embed", "gemm", "attn", "lm_head"]


def _x(cat, name, ts, dur, corr=None, stream=7):
    e = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": stream, "args": {"stream": stream}}
    if corr is not None:
        e["args"]["correlation"] = corr
    return e


def _steps(n=3, d2v=6.0, head=2.0, v2d=25.0, guard=True, host_waits=False):
    """Decode steps as a profiler writes them: graph launches on the host, their records on the device.

    ``host_waits``: the verify phase launches only once the draft's kernels run (a host-serial boundary).
    """
    ev, t, corr = [], 100.0, 10
    for k in range(n):
        ev += [
            _x("user_annotation", kt.phase_name("draft", k), t, 5.0),
            _x("cuda_runtime", "cudaGraphLaunch", t + 1, 2.0, corr),
        ]
        ev += [_x("kernel", "draft_a", t + 8, 3.0, corr), _x("kernel", "draft_b", t + 12, 3.0, corr)]
        draft_end = t + 15
        launch = t + 13 if host_waits else t + 7
        ev += [
            _x("user_annotation", kt.phase_name("verify", k), launch - 1, 4.0),
            _x("cuda_runtime", "cudaGraphLaunch", launch, 2.0, corr + 1),
        ]
        dev = draft_end + d2v - head
        ev.append(_x("kernel", "head_w4", dev, head, corr + 1))
        fwd0 = dev = dev + head
        if guard:  # a device guard on a side stream, interleaved with the forward in start order
            ev.append(_x("kernel", "guard", fwd0 + 1, 3.0, corr + 1, stream=9))
        for name in FORWARD:
            ev.append(_x("kernel", name, dev, 5.0, corr + 1))
            dev += 5.0
        ev.append(_x("kernel", "accept", dev + 1, 1.0, corr + 1))
        corr += 2
        t = dev + v2d - 8  # the next draft kernel starts v2d after the forward's end
    return {"traceEvents": ev}


@pytest.mark.parametrize("guard", [True, False])
def test_forward_found_on_its_stream_beside_a_side_stream(guard):
    figs = kt.step_figures(kt.attribute(kt.load_trace(_steps(guard=guard))), FORWARD)
    assert [f["kernel_draft_to_verify_us"] for f in figs] == pytest.approx([6.0] * 3)
    assert [f["head_us"] for f in figs] == pytest.approx([2.0] * 3)  # the guard is not the head
    assert [f["kernel_verify_to_draft_us"] for f in figs[:2]] == pytest.approx([25.0] * 2)


def test_time_window_fallback_without_correlation_ids():
    """Graph kernels without correlation ids, a host that waits for the device: attributed by the phases'
    launch times, the same figures."""
    trace = _steps(guard=False, host_waits=True)
    for e in trace["traceEvents"]:
        if e["cat"] == "kernel":
            del e["args"]["correlation"]
    steps, method = kt.attribute_with_method(kt.load_trace(trace))
    assert method == "time-window" and sorted(steps) == [0, 1, 2]
    assert [r.name for r in steps[1].draft] == ["draft_a", "draft_b"]
    figs = kt.step_figures(steps, FORWARD)
    assert [f["kernel_draft_to_verify_us"] for f in figs] == pytest.approx([6.0] * 3)
    assert kt.attribute_with_method(kt.load_trace(_steps()))[1] == "correlation"


def test_classify_labels_each_record():
    steps = kt.attribute(kt.load_trace(_steps(guard=False)))
    kinds = {r.name: kind for r, kind in kt.classify(steps[0], FORWARD)}
    assert kinds == {
        "draft_a": "draft",
        "draft_b": "draft",
        "head_w4": "head",
        "embed": "forward",
        "gemm": "forward",
        "attn": "forward",
        "lm_head": "forward",
        "accept": "tail",
    }


def test_saved_trace_round_trip_and_kernel_picture(tmp_path):
    from specgen.bench import profiler as bp
    from specgen.bench.kernel_plot import plot_kernels

    runs = []
    for mode, d2v in (("baseline", 300.0), ("specgen", 4.0)):
        row = {"mode": mode, "depth": 3, "batch": 1}
        row.update(bp.figures(_steps(d2v=d2v), FORWARD))
        assert row["kernel_draft_to_verify_us"] == pytest.approx(d2v) and row["kernel_steps"] == 3
        assert row["kernel_draft_to_verify_steps_us"] == pytest.approx([d2v] * 3)
        steps_v2d = row["kernel_verify_to_draft_steps_us"]  # the last step has no next draft
        assert len(steps_v2d) == 2 and row["kernel_verify_to_draft_us"] == pytest.approx(statistics.median(steps_v2d))
        row["kernel_trace"] = bp.trace_name(row)
        bp.write_trace(tmp_path / row["kernel_trace"], _steps(d2v=d2v), FORWARD, row)
        runs.append(row)
    events, forward, _ = bp.read_trace(tmp_path / runs[1]["kernel_trace"])
    assert forward == FORWARD and kt.summarize(kt.step_figures(kt.attribute(events), forward))["head_us"] == 2.0
    assert kt.load_trace(tmp_path / runs[0]["kernel_trace"])  # a .json.gz loads by path too
    pytest.importorskip("matplotlib")
    png = plot_kernels({"runs": runs, "model": "tiny"}, tmp_path)
    assert png.name == "kernel_timeline.png" and png.read_bytes()[:4] == b"\x89PNG"


def test_config_long_prompts_presets_and_profile_steps():
    from specgen.bench.harness import BenchError, configure
    from specgen.models.qwen3 import PRESETS

    big = PRESETS["qwen3-8b"]
    assert (
        big.num_layers,
        big.hidden_size,
        big.num_heads,
        big.num_kv_heads,
        big.head_dim,
        big.intermediate_size,
        big.vocab_size,
    ) == (36, 4096, 32, 8, 128, 12288, 151936)
    c = configure(
        model="tiny",
        depths=(3, 5),
        prompt_len=2048,
        block_table_width=0,
        steps=32,
        warmup=3,
        acceptance=0.7,
        device="cpu",
        modes=("baseline",),
    )
    need = 2048 + (3 + 32 + 2) * 6 + 1 + 3 * 6 + 1
    assert c.block_table_width == -(-need // c.block_size) and c.prompt_len == 2048
    assert c.profile_steps == 8  # the CPU profiles its host-serial runs (the calibration's host compute)
    with pytest.raises(BenchError, match="--prompt-len 2048 need"):
        configure(model="tiny", prompt_len=2048, block_table_width=32, device="cpu", modes=("baseline",))
    with pytest.raises(BenchError, match="--profile-steps"):
        configure(device="cpu", profile_steps=-1)
    d = configure(device="cpu", draft="dflash", modes=("baseline", "inductor"))
    assert d.modes == ("baseline",) and "inductor" in dict(d.skipped)


def test_bench_at_a_2048_token_prompt_on_cpu():
    """The block table sized by --block-table-width 0 holds a 2048-token prompt and the run's steps."""
    from specgen.bench.harness import configure, run_bench

    c = configure(
        model="tiny",
        depths=(2,),
        batches=(2,),
        prompt_len=2048,
        block_table_width=0,
        steps=2,
        warmup=1,
        device="cpu",
        modes=("baseline",),
        bare_repeats=2,
    )
    result = run_bench(c)
    (row,) = result["runs"]
    assert "error" not in row and row["steps"] == 2 and row["capture_s"] is not None
    assert result["layout"]["block_table_width"] == c.block_table_width


def test_engine_marks_only_the_profiled_steps(tiny_target):
    """profile=True: the trace holds the draft and verify ranges of the steps after the warm-up, none before."""
    from specgen.engine import SpecDecodeEngine
    from specgen.models import MTPHead

    head = MTPHead.create(tiny_target, seed=1)
    rng = random.Random(0)
    prompts = [[rng.randrange(512) for _ in range(5)] for _ in range(2)]
    eng = SpecDecodeEngine(tiny_target, head, mode="baseline", width=3, batch=2, block_size=16, block_table_width=8)
    res = eng.run(prompts, steps=3, warmup_steps=2, profile=True)
    from specgen.engine.profiling import HOST_RANGE_PREFIX

    marks = [e["name"] for e in kt.load_trace(res.trace) if str(e.get("name", "")).startswith(kt.PHASE_PREFIX)]
    names = {n for n in marks if not n.startswith(HOST_RANGE_PREFIX)}
    assert names == {kt.phase_name(p, i) for p in ("draft", "verify") for i in (2, 3, 4)}
    # and the host-serial mode's own updates, once per family and profiled step (the calibration's host compute)
    host = sorted(n[len(HOST_RANGE_PREFIX) :] for n in marks if n.startswith(HOST_RANGE_PREFIX))
    assert host == sorted(["spec_verify_head_update", "greedy_prefix_verify", "prepare_next_draft"] * 3)
    assert res.capture_s is not None and eng.run(prompts, steps=1, warmup_steps=1).trace is None
    json.dumps(res.trace)  # a Chrome trace: plain JSON


@pytest.mark.gpu
def test_cuda_kernel_figures_for_every_mode(engine_kernels):
    """On the GPU: every mode's profiled steps give all three kernel-level figures, through correlation ids."""
    from specgen.bench import calibration
    from specgen.bench.bare import bare_trace, forward_trace
    from specgen.bench.profiler import figures
    from specgen.engine import MODES, SpecDecodeEngine
    from specgen.models import MTPHead, Qwen3Model

    m = Qwen3Model.create("tiny", seed=0, device="cuda")
    head = MTPHead.create(m, seed=1)
    rng = random.Random(1)
    prompts = [[rng.randrange(512) for _ in range(6)] for _ in range(2)]
    for k, mode in enumerate(["baseline", *MODES]):  # the first: the process's first profiled run
        eng = SpecDecodeEngine(
            m, head, mode=mode, width=4, batch=2, block_size=16, block_table_width=8, library=engine_kernels
        )
        res = eng.run(prompts, steps=5, warmup_steps=2, profile=True)
        forward = kt.forward_names(kt.load_trace(forward_trace(eng)))
        bare = kt.attribute(kt.load_trace(bare_trace(eng)))
        draft = kt.phase_signature(bare)
        eng.close()
        fig = figures(res.trace, forward, draft)
        if k > 0:  # the bare reference: the draft graph, then the forward graph alone
            bare_gap = kt.summarize(kt.step_figures(bare, forward))["kernel_draft_to_verify_us"]
            assert draft and bare_gap is not None and bare_gap > 0, (mode, bare_gap)
        print(mode, fig, f"capture {res.capture_s:.4f}s")
        if k == 0:  # known: no graph kernels in the first profiled run of a process (see StepProfiler)
            continue
        assert forward and res.capture_s > 0
        assert fig["kernel_attribution"] == "correlation" and fig["kernel_steps"] >= 4, (mode, fig)
        assert fig["kernel_draft_to_verify_us"] is not None and fig["kernel_verify_to_draft_us"] is not None
        assert fig["head_us"] is not None and fig["head_us"] >= 0
        # the cost model's calibration from the same trace (calibration.py)
        s = calibration.samples(kt.load_trace(res.trace), forward, draft)
        print(mode, {k: (len(v), sorted(v)[len(v) // 2]) for k, v in sorted(s.items())})
        assert s["issue.graph_replay"] and all(v >= 0 for vals in s.values() for v in vals)
        if mode in ("baseline", "compile"):  # a synchronizing read-back every step
            assert len(s["run.host_sync"]) >= 5, (mode, s)
        if mode == "baseline":
            assert s["run.h2d"] and s["issue.h2d"] and s["host_family.spec_verify_head_update"]
        if mode in ("specgen", "inductor"):  # the head update runs inside the verify graph
            assert s["in_graph_kernel"], (mode, s)
        torch.cuda.synchronize()
