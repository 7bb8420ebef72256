"""A forward whose graph forks (a block draft's context projection beside the target's later layers): a graph
replay may continue the forward on either stream, so its span is found from two lanes, not from one stream."""

import json

import pytest
from oracles.kernel_traces import event

from specgen.bench import kernel_timeline as kt

LANE_A = ["embed", "layer0", "layer1", "fc", "kv_proj"]  # the first kernel's stream: the early layers and the fork
LANE_B = ["layer2", "layer3", "lm_head", "argmax"]  # the stream that ran the forward's last kernel


def _bare_forward(a=5, b=6):
    ev, t = [], 0.0
    for name in LANE_A[:3]:
        ev.append(event("kernel", name, t, 9.0, 1, tid=a))
        t += 10.0
    ev += [event("kernel", "fc", 30.0, 4.0, 1, tid=a), event("kernel", "kv_proj", 35.0, 4.0, 1, tid=a)]
    t = 31.0
    for name in LANE_B:
        dur = 20.0 if name == "lm_head" else 9.0
        ev.append(event("kernel", name, t, dur, 1, tid=b))
        t += dur + 1.0
    return ev


def test_forward_lanes_are_the_first_and_the_last_kernel_s_streams():
    assert kt.forward_lanes(_bare_forward()) == [LANE_A, LANE_B]
    # forward_names keeps the stream with the most kernels, which here stops at the projection
    assert kt.forward_names(_bare_forward()) == LANE_A
    one = [event("kernel", n, 10.0 * i, 9.0, 1, tid=3) for i, n in enumerate(LANE_A + LANE_B)]
    assert kt.forward_lanes(one) == LANE_A + LANE_B  # one stream: the flat list of old
    assert kt.lanes(LANE_A) == [LANE_A] and kt.lanes([LANE_A, LANE_B]) == [LANE_A, LANE_B]
    assert kt.forward_lanes([]) == []


def _steps(n=3, v2d=12.0, streams=(5, 6)):
    """``n`` steps: a draft graph, then a step graph that runs the head and lane A on one stream, lane B on
    another and a tail on a third; each next draft starts ``v2d`` us after the argmax's end."""
    ev, t, corr, ends = [], 1000.0, 1, []
    for k in range(n):
        ev.append(event("user_annotation", kt.phase_name("draft", k), t, 8.0))
        ev.append(event("cuda_runtime", "cudaGraphLaunch", t + 1, 3, corr))
        ev.append(event("kernel", "draft_0", t + 10, 4.0, corr))
        corr += 1
        ev.append(event("user_annotation", kt.phase_name("verify", k), t + 9, 6.0))
        ev.append(event("cuda_runtime", "cudaGraphLaunch", t + 10, 3, corr))
        ev.append(event("kernel", "head", t + 15, 2.0, corr, tid=streams[0]))
        for e in _bare_forward(*streams):
            ev.append(event("kernel", e["name"], e["ts"] + t + 18, e["dur"], corr, tid=e["tid"]))
        end = max(e["ts"] + e["dur"] for e in _bare_forward()) + t + 18
        ev.append(event("kernel", "context_tail", end + 2.0, 3.0, corr, tid=7))
        corr += 1
        ends.append(end)
        t = end + v2d - 10
    return {"traceEvents": ev}, ends


@pytest.mark.parametrize("streams", [(5, 6), (6, 5)])
def test_the_span_runs_from_the_first_lane_s_start_to_the_last_lane_s_end(streams):
    trace, ends = _steps(streams=streams)
    steps = kt.attribute(kt.load_trace(trace))
    figs = kt.step_figures(steps, [LANE_A, LANE_B], ["context_tail"])
    for f in figs[:2]:
        assert f["kernel_verify_to_draft_us"] == pytest.approx(12.0)  # from the argmax, not from the projection
        assert f["kernel_draft_to_verify_us"] == pytest.approx(4.0)  # draft_0 ends at t + 14, embed starts at + 18
        assert f["head_us"] == pytest.approx(2.0)
        assert f["projection_us"] == pytest.approx(3.0)
        assert f["post_verify_idle_us"] == pytest.approx(12.0 - 3.0)
    # lane A alone puts the forward's end at the projection's: the last layers and the LM head count as the gap
    assert kt.step_figures(steps, LANE_A)[0]["kernel_verify_to_draft_us"] == pytest.approx(12.0 + 81.0 - 39.0)
    labels = dict((r.name, kind) for r, kind in kt.classify(steps[0], [LANE_A, LANE_B]))
    assert labels["lm_head"] == labels["kv_proj"] == "forward" and labels["context_tail"] == "tail"
    assert labels["head"] == "head"


def test_a_missing_lane_leaves_the_figures_empty():
    trace, _ = _steps(n=2)
    steps = kt.attribute(kt.load_trace(trace))
    assert kt.forward_span(steps[0].verify, [LANE_A, ["layer2", "no_such_kernel"]]) is None
    assert kt.step_figures(steps, [LANE_A, LANE_B + ["extra"]])[0]["kernel_verify_to_draft_us"] is None
    assert kt.forward_span(steps[0].verify, [LANE_A, ["kv_proj"]]) is None  # not matched inside the first lane
    first, last = kt.forward_span(steps[0].verify, [LANE_A, LANE_B])
    assert (first.name, last.name) == ("embed", "argmax")


def test_refigure_reads_the_last_lane_from_a_saved_trace(tmp_path, capsys):
    """benchmarks/refigure.py: a trace saved with the main lane alone (before ``forward_lanes``) gives the figures
    of old and, with ``--last-lane-of``, those of the two lanes; a trace whose forward ran on one stream keeps its
    figures."""
    from oracles.scripts import benchmark_module

    from specgen.bench.profiler import write_trace

    trace, _ = _steps(n=3)
    path = tmp_path / "trace.json.gz"
    write_trace(path, trace, LANE_A, {"mode": "specgen", "depth": 3, "batch": 1}, [], ["context_tail"])
    out = tmp_path / "figures.json"
    assert benchmark_module("refigure").main([str(path), "--last-lane-of", "lm_head", "--out", str(out)]) == 0
    got = json.loads(out.read_text())
    assert got["saved"]["kernel_verify_to_draft_us"] == pytest.approx(12.0 + 81.0 - 39.0)
    assert got["lanes"]["kernel_verify_to_draft_us"] == pytest.approx(12.0)
    assert got["lanes"]["post_verify_idle_us"] == pytest.approx(9.0) and got["last_lane_kernels"] == len(LANE_B)
    capsys.readouterr()
    assert benchmark_module("refigure").main([str(path), "--last-lane-of", "no_such_kernel"]) == 0
    printed = capsys.readouterr()
    assert "lanes" not in json.loads(printed.out) and "no_such_kernel" in printed.err
