"""Profiled boundaries at which the device waited for the host's launch (``bench/host_bound.py``): which gaps are
host-bound, the medians without them, and a recorded sweep whose first profiled steps trailed the host."""

import json
from pathlib import Path

import pytest
from oracles.kernel_traces import FORWARD, event
from oracles.scripts import benchmark_module

import specgen
from specgen.bench import host_bound as hb
from specgen.bench import kernel_timeline as kt
from specgen.bench.profiler import figures, read_trace

SWEEP = Path(specgen.__file__).parent / "benchmarks/results/performance/qwen3-0.6b/sweep_d53c007_h100/four_modes"


def _trace(verify_call_ends: list[float], draft_call_starts: list[float] | None = None):
    """Steps of one graph each (draft kernels, then the forward; one correlation id a step), 100 us apart on the
    device; step k's launch call spans ``draft_call_starts[k]`` (default: 50 us before its first kernel) to
    ``verify_call_ends[k]``, both relative to the end of step k's draft kernels."""
    ev, corr = [], 1
    for k, end in enumerate(verify_call_ends):
        t = 1000.0 + 100.0 * k
        start = (draft_call_starts or [None] * len(verify_call_ends))[k]
        draft_end = t + 10.0
        call_start = draft_end + start if start is not None else t - 50.0
        ev.append(event("user_annotation", kt.phase_name("verify", k), call_start - 1.0, 2.0))  # a fused step
        ev.append(event("cuda_runtime", "cudaGraphLaunch", call_start, draft_end + end - call_start, corr))
        ev.append(event("kernel", "draft_a", t, 4.0, corr))
        ev.append(event("kernel", "draft_b", t + 5.0, 5.0, corr))
        at = draft_end + 4.0
        for name in FORWARD:
            ev.append(event("kernel", name, at, 10.0, corr))
            at += 11.0
        corr += 1
    return {"traceEvents": ev}


def _marked(trace):
    events = kt.load_trace(trace)
    steps = kt.attribute(events, ["draft_a", "draft_b"])
    return hb.mark(kt.step_figures(steps, FORWARD), steps, FORWARD, hb.launch_calls(events)), steps


def test_a_gap_inside_a_replay_is_host_bound_while_its_launch_call_runs():
    """The forward follows the draft in the same launch: the gap is the host's when the call returned after the
    draft's end (the device ran what was submitted and waited for the rest)."""
    figs, _ = _marked(_trace([30.0, -5.0, 2.0, -40.0]))
    assert [("kernel_draft_to_verify_us" in f["host_bound"]) for f in figs] == [True, False, True, False]
    assert all(f["kernel_draft_to_verify_us"] == pytest.approx(4.0) for f in figs)


def test_a_gap_before_a_launch_s_first_record_is_host_bound_when_the_call_began_after_it():
    """The next step's draft is its launch's first record: that gap is the host's when the launch call began after
    the forward's end, whatever the call's length."""
    forward_end = 4.0 + 11.0 * (len(FORWARD) - 1) + 10.0  # relative to the draft's end
    # step 1's call begins after step 0's forward ended (100 us later on the device); step 2's long before step 1's
    starts = [-50.0, -100.0 + forward_end + 3.0, -300.0]
    figs, _ = _marked(_trace([-20.0, -20.0, 400.0], starts))
    assert ["kernel_verify_to_draft_us" in f["host_bound"] for f in figs] == [True, False, False]
    assert figs[0]["host_bound"] == hb.AFTER_VERIFY


def test_medians_leave_out_host_bound_steps_and_count_them():
    d2v, v2d, bound = (900.0, 300.0, 5.0, 4.0), (7.0, 8.0, 6.0, None), (hb.AFTER_DRAFT, hb.AFTER_DRAFT, (), ())
    figs = [
        {"kernel_draft_to_verify_us": a, "head_us": 2.0, "kernel_verify_to_draft_us": b, "host_bound": c}
        for a, b, c in zip(d2v, v2d, bound)
    ]
    s = hb.summarize(figs)
    assert s["kernel_draft_to_verify_us"] == pytest.approx(4.5)  # kt.summarize reads 152.5
    assert kt.summarize(figs)["kernel_draft_to_verify_us"] == pytest.approx(152.5)
    assert s["kernel_verify_to_draft_us"] == pytest.approx(7.0)
    assert s["host_bound_steps"] == {"kernel_draft_to_verify_us": 2}


def test_a_figure_bound_at_every_step_keeps_every_step():
    """A mode that waits for the host at a boundary by design (a synchronizing read-back): every step is bound, and
    the figure stays the median over all of them."""
    figs = [{"kernel_verify_to_draft_us": v, "host_bound": hb.AFTER_VERIFY} for v in (200.0, 240.0, 220.0)]
    s = hb.summarize(figs)
    assert s["kernel_verify_to_draft_us"] == pytest.approx(220.0) and s["host_bound_steps"] == {}


def test_a_trace_without_launch_calls_marks_nothing():
    trace = _trace([30.0, 30.0])
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e["cat"] != "cuda_runtime"]
    events = kt.load_trace(trace)
    steps = kt.attribute(events)  # by time windows: the phases' ranges
    figs = hb.mark(kt.step_figures(steps, FORWARD), steps, FORWARD, hb.launch_calls(events))
    assert all(f["host_bound"] == () for f in figs)


def test_the_recorded_sweep_s_first_profiled_steps_trailed_the_host():
    """The H100 sweep at d53c007: specgen's first five profiled steps at B = 1 read a draft->verify gap of 205-885 us
    with the launch call still running; the other three, 4.4-5.3 us, as the one-mode sweep's steps."""
    events, forward, draft = read_trace(SWEEP / "traces/trace_specgen_d3_b1.json.gz")
    out = figures({"traceEvents": events}, forward, draft)
    assert out["host_bound_steps"]["kernel_draft_to_verify_us"] == 5
    assert 4.0 < out["kernel_draft_to_verify_us"] < 6.0
    assert out["kernel_draft_to_verify_steps_us"][0] > 800.0  # the per-step list keeps every step


def test_refigure_rewrites_a_bench_json_from_its_traces(tmp_path):
    """benchmarks/refigure.py --bench: every run naming a trace figured again; the recorded sweep's specgen B = 1
    draft->verify falls from 287 us (as the bench computed it then) to the kept steps' 4.5 us."""
    out = tmp_path / "bench.json"
    bench = json.loads((SWEEP / "bench.json").read_text())
    keep = [r for r in bench["runs"] if r["mode"] == "specgen" and r["batch"] == 1]
    assert keep[0]["kernel_draft_to_verify_us"] > 200.0
    src = tmp_path / "src"
    (src / "traces").mkdir(parents=True)
    (src / "bench.json").write_text(json.dumps({**bench, "runs": keep}))
    (src / keep[0]["kernel_trace"]).write_bytes((SWEEP / keep[0]["kernel_trace"]).read_bytes())
    assert benchmark_module("refigure").main(["--bench", str(src / "bench.json"), "--out", str(out)]) == 0
    row = json.loads(out.read_text())["runs"][0]
    assert row["kernel_draft_to_verify_us"] == pytest.approx(4.514, abs=0.01)
    assert row["host_bound_steps"] == {"kernel_draft_to_verify_us": 5, "kernel_verify_to_draft_us": 2}
    with pytest.raises(SystemExit):
        benchmark_module("refigure").main(["--bench", str(src / "bench.json")])  # no --out
