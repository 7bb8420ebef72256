"""The cost model's calibration from profiled steps: synthetic trace events, and one real tiny CPU bench."""

from __future__ import annotations

import json

import pytest

from specgen.bench import calibration as cal
from specgen.bench import kernel_timeline as kt
from specgen.engine.profiling import HOST_RANGE_PREFIX

FORWARD = ["gemm", "attn"]


def _x(cat, name, ts, dur, corr=None, stream=7):
    e = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": stream, "args": {"stream": stream}}
    if corr is not None:
        e["args"]["correlation"] = corr
    return e


def _trace():
    """Two steps of a mixed boundary: copies, a standalone launch, events, a graph with a head, syncs."""
    ev = []
    for k, t in enumerate((0.0, 1000.0)):
        c = 100 * (k + 1)
        ev += [
            _x("user_annotation", kt.phase_name("draft", k), t, 20.0),
            _x("cuda_runtime", "cudaGraphLaunch", t + 1, 8.0 + k, c),
            _x("kernel", "draft_mtp", t + 10, 100.0, c),
            _x("user_annotation", kt.phase_name("verify", k), t + 30, 400.0),
            # a synchronous read-back: the copy ends at t+112, the call returns 30 (k=0) / 40 us later
            _x("cuda_runtime", "cudaMemcpyAsync", t + 31, 4.0, c + 1),
            _x("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", t + 110, 2.0, c + 1),
            _x("cuda_runtime", "cudaStreamSynchronize", t + 36, 76.0 + 30 + 10 * k),
            _x("user_annotation", HOST_RANGE_PREFIX + f"spec_verify_head_update#{k}", t + 150, 50.0 + k),
            _x("cuda_runtime", "cudaMemcpyAsync", t + 205, 6.0, c + 2),
            _x("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", t + 215, 3.0, c + 2),
            _x("cuda_runtime", "cudaLaunchKernel", t + 212, 5.0, c + 3),
            _x("kernel", "accept_len", t + 220, 1.5, c + 3),
            _x("cuda_runtime", "cudaEventRecord", t + 218, 1.0),
            _x("cuda_runtime", "cudaStreamWaitEvent", t + 219, 2.0),
            _x("cuda_runtime", "cudaGraphLaunch", t + 222, 10.0, c + 4),
            _x("kernel", "head_w4", t + 230, 2.5, c + 4),
            _x("gpu_memcpy", "Memcpy DtoD (Device -> Device)", t + 233, 1.0, c + 4),
            _x("kernel", "gemm", t + 235, 40.0, c + 4),
            _x("kernel", "attn", t + 276, 30.0, c + 4),
        ]
    return ev


def test_samples_from_synthetic_trace_events():
    s = cal.samples(_trace(), FORWARD)
    assert s["issue.graph_replay"] == [8.0, 10.0, 9.0, 10.0]
    assert s["issue.d2h"] == [4.0, 4.0] and s["issue.h2d"] == [6.0, 6.0]
    assert s["issue.device_kernel"] == [5.0, 5.0]
    assert s["issue.event_record"] == [1.0, 1.0] and s["issue.event_wait"] == [2.0, 2.0]
    assert s["run.d2h"] == [2.0, 2.0] and s["run.h2d"] == [3.0, 3.0]
    assert s["run.host_sync"] == pytest.approx([30.0, 40.0])  # the call's end minus the copy's end
    assert s["in_graph_copy"] == [1.0, 1.0]
    # verify-phase kernels outside the forward: the standalone one and the graph's head; the draft's are not
    assert sorted(s["run.device_kernel"]) == [1.5, 1.5, 2.5, 2.5]
    assert s["in_graph_kernel"] == [2.5, 2.5]
    assert s["host_family.spec_verify_head_update"] == [50.0, 51.0]
    # without the forward's names no kernel can be called an update: those figures are left out
    assert not {"run.device_kernel", "in_graph_kernel"} & set(cal.samples(_trace()))


def test_a_sync_that_waited_for_nothing_costs_its_whole_call():
    ev = [_x("kernel", "k", 0.0, 5.0, 1), _x("cuda_runtime", "cudaEventSynchronize", 50.0, 3.0)]
    assert cal.samples(ev)["run.host_sync"] == [3.0]


def test_costs_document_loads_and_omits_what_was_not_measured(tmp_path):
    from specgen.passes import CostModel
    from specgen.passes.ir.cost import DEFAULT_ISSUE_US, DEFAULT_RUN_US

    by_batch = {1: cal.samples(_trace(), FORWARD), 8: {"run.h2d": [5.0, 7.0, 9.0]}}
    doc = cal.costs(by_batch, {"model": "synthetic"})
    assert doc["run"]["h2d"] == 5.0  # the pooled median of 3, 3, 5, 7, 9
    assert doc["measured"]["run.h2d"]["samples"] == 5 and doc["measured"]["run.h2d"]["from"]
    assert doc["by_batch"]["8"]["run"] == {"h2d": 7.0} and doc["source"] == {"model": "synthetic"}
    assert "host_compute" not in doc["run"] and "event_record" not in doc["run"]  # never measured: left out
    assert doc["host_family"] == {"spec_verify_head_update": 50.5}
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(doc))
    m = CostModel.from_json(path)
    assert m.run["h2d"] == 5.0 and m.run["host_compute"] == DEFAULT_RUN_US["host_compute"]
    assert m.in_graph_kernel == 2.5 and m.in_graph_copy == 1.0
    # the profile's host API durations (CUPTI inflates them) are recorded for comparison, never loaded
    assert "issue" not in doc and m.issue["graph_replay"] == DEFAULT_ISSUE_US["graph_replay"]
    profiled = doc["measured"]["profiled.issue.graph_replay"]
    assert profiled["us"] == 9.5 and profiled["loaded"] is False and profiled["method"] == cal.PROFILED_CALL
    assert doc["method"]["run.h2d"] == "kernel_trace" and doc["method"]["run.host_sync"] == "profiled_sync"
    assert "profiled.issue.graph_replay" not in doc["method"] and set(doc["methods"]) >= set(doc["method"].values())
    assert CostModel.from_dict(doc["by_batch"]["8"]).run["h2d"] == 7.0
    assert cal.costs({1: {}}, {}) is None


def test_the_host_clock_figures_are_the_loaded_issue_costs(tmp_path):
    """The unprofiled host clock's issue.* figures replace the profile's, pooled and per batch, with their method;
    the machine and the model shape go to the top of the file."""
    from specgen.passes import CostModel

    profiled = {1: cal.samples(_trace(), FORWARD), 8: {"run.h2d": [5.0]}}
    clocked = {1: {"issue.graph_replay": [3.0, 4.0, 5.0], "issue.h2d": [2.0]}, 8: {"issue.graph_replay": [6.0]}}
    clock = {"method": {"issue.graph_replay": "perf_counter_ns around replay()"}, "repeats": 3, "not_measured": {}}
    source = {"model": "synthetic", "machine": {"device": "X"}, "model_shape": {"hidden_size": 8}}
    doc = cal.costs(profiled, source, clocked, clock)
    assert doc["issue"] == {"graph_replay": 4.5, "h2d": 2.0}  # medians of the host clock's samples only
    assert doc["measured"]["issue.graph_replay"]["method"] == cal.HOST_CLOCK
    assert doc["measured"]["issue.graph_replay"]["from"] == "perf_counter_ns around replay()"
    assert doc["measured"]["profiled.issue.graph_replay"]["us"] == 9.5  # the profile's, for comparison
    assert doc["method"]["issue.h2d"] == cal.HOST_CLOCK and doc["method"]["in_graph_kernel"] == "kernel_trace"
    assert doc["by_batch"]["1"]["issue"]["graph_replay"] == 4.0 and doc["by_batch"]["8"]["issue"] == {
        "graph_replay": 6.0
    }
    assert doc["machine"] == {"device": "X"} and doc["model_shape"] == {"hidden_size": 8}
    assert doc["source"] == {"model": "synthetic"} and doc["host_clock"]["repeats"] == 3
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(doc))
    m = CostModel.from_json(path)
    assert m.issue["graph_replay"] == 4.5 and m.issue["h2d"] == 2.0
    assert CostModel.from_dict(doc["by_batch"]["8"]).issue["graph_replay"] == 6.0
    # a pass with the host clock alone (the CPU's copies) still makes a file
    assert cal.costs({}, {}, {2: {"issue.h2d": [1.0]}})["issue"] == {"h2d": 1.0}


def test_a_tiny_cpu_bench_writes_the_host_calibration(tmp_path, capsys):
    """The CPU profiles the host-serial runs only; costs.json carries their host compute, per batch too."""
    from specgen.bench import report as bench_report
    from specgen.bench.harness import configure, run_bench
    from specgen.passes import CostModel, bubble_us, build_boundary

    c = configure(
        model="tiny",
        depths=(2,),
        batches=(1, 2),
        steps=2,
        warmup=1,
        device="cpu",
        modes=("baseline",),
        bare_repeats=2,
        profile_steps=3,
    )
    result = run_bench(c, trace_dir=tmp_path)
    doc = result["calibration"]
    # the host-serial families: the host clock's figures are loaded (200 calls x 2 batches); the profiled
    # ranges (3 steps x 2 batches) stay beside them, not loaded
    head = "host_family.spec_verify_head_update"
    assert doc["measured"][head]["samples"] == 2 * 200 and doc["method"][head] == cal.HOST_CLOCK
    assert "fresh host copy" in doc["measured"][head]["from"]
    prof = doc["measured"]["profiled." + head]
    assert prof["samples"] == 6 and prof["loaded"] is False and prof["method"] == "profiled_host_range"
    assert set(doc["host_family"]) == {"spec_verify_head_update", "greedy_prefix_verify", "prepare_next_draft"}
    assert set(doc["by_batch"]) == {"1", "2"} and all(v > 0 for v in doc["host_family"].values())
    assert "in_graph_kernel" not in doc  # the CPU has no graphs
    # the unprofiled host clock: the CPU's copies and in-line ops; events and graph launches are not measured
    assert set(doc["issue"]) == {"h2d", "d2h", "device_kernel"} and all(v > 0 for v in doc["issue"].values())
    assert all(doc["method"][f"issue.{k}"] == cal.HOST_CLOCK for k in doc["issue"])
    assert set(doc["not_measured"]) == {"issue.graph_replay", "issue.event_record", "issue.event_wait"}
    assert all("not measured on cpu" in why for why in doc["not_measured"].values())
    assert doc["measured"]["issue.h2d"]["samples"] >= 2 * 200 and doc["host_clock"]["repeats"] == 200
    assert doc["model_shape"]["name"] == "tiny" and doc["model_shape"]["batches"] == [1, 2]
    assert doc["machine"]["device"] == "cpu" and doc["source"]["device_guard"] is True
    assert all(r["calibrated"] for r in result["runs"])
    # the engine loop's own host work after baseline's host tail, timed in each timed step (the step before it,
    # a warm-up one for the first, ended in the host tail), loaded per batch as the host clock's
    turn = "boundary.baseline.host_turnaround"
    assert doc["method"][turn] == cal.HOST_CLOCK and doc["measured"][turn]["samples"] == 2 * 2
    assert "timed steps" in doc["measured"][turn]["from"] and doc["boundary"]["baseline"]["host_turnaround"] > 0
    assert all(r["host_turnaround_us"] > 0 for r in result["runs"])
    paths = bench_report.write(result, tmp_path)
    assert tmp_path / "costs.json" in paths
    assert json.loads((tmp_path / "bench.json").read_text())["costs"] == "costs.json"
    model = CostModel.from_json(tmp_path / "costs.json")
    g = build_boundary("draft-to-verify", width=3, batch=1)
    host_ops = [o for o in g.ops if o.kind.value == "host_compute"]
    expected = sum(model.host_costs(g).values())  # the measured step shared by the family's host ops
    assert expected == pytest.approx(doc["host_family"]["spec_verify_head_update"])
    assert len(model.host_costs(g)) == len(host_ops)
    assert bubble_us(g, model) != bubble_us(g)
    # end to end: the bench's own files through specgen plan --compare
    from specgen.cli import main

    assert main(["plan", "--compare", str(tmp_path / "bench.json"), "--costs", str(tmp_path / "costs.json")]) == 0
    assert "| n/a (CPU) |" in capsys.readouterr().out
    rows = json.loads((tmp_path / "compare.json").read_text())["rows"]
    assert {(r["boundary"], r["batch"]) for r in rows} == {
        (b, n) for b in ("draft-to-verify", "verify-to-draft") for n in (1, 2)
    }
    assert all(r["predicted_calibrated_us"] != r["predicted_default_us"] for r in rows)
    del result["calibration"]  # a run without a calibration leaves no stale costs.json behind
    bench_report.write(result, tmp_path)
    assert not (tmp_path / "costs.json").exists()


def test_boundary_terms_are_loaded_per_mode_and_the_long_switch_only_measured():
    from specgen.passes import CostModel

    ev = _trace()
    assert not any(k.startswith("boundary.") for k in cal.samples(ev, FORWARD))  # no mode: no boundary figures
    samples = {
        "boundary.specgen.graph_switch": [6.0, 7.0],
        "boundary.specgen.cast": [1.1],
        "boundary.specgen.pack_kernel": [1.2],
        "boundary.specgen.graph_switch_behind_copies": [14.0],
    }
    doc = cal.costs({8: samples}, {"model": "synthetic"})
    assert doc["boundary"] == {"specgen": {"cast": 1.1, "graph_switch": 6.5}}
    assert doc["by_batch"]["8"]["boundary"] == doc["boundary"]
    m = doc["measured"]
    assert m["boundary.specgen.graph_switch"]["method"] == "kernel_trace"
    assert m["boundary.specgen.graph_switch_behind_copies"]["loaded"] is False
    assert m["boundary.specgen.pack_kernel"]["loaded"] is False
    assert "boundary.specgen.pack_kernel" not in doc["method"]
    assert CostModel.from_dict(doc).boundary == {"specgen": {"cast": 1.1, "graph_switch": 6.5}}
    assert CostModel.from_dict({}).boundary == {}  # a file without them: nothing added
    with pytest.raises(ValueError, match="boundary"):
        CostModel.from_dict({"boundary": {"specgen": {"no_such_term": 1.0}}})


@pytest.mark.parametrize("draft", ["mtp", "dflash"])
def test_the_host_clock_times_the_host_serial_families_on_copies(draft):
    """``host_families``: the head update (and the MTP chain's host tail) timed over host copies of the step
    buffers, each call on its own copy, so the engine's buffers are left as they were."""
    import torch

    from specgen.bench import host_clock
    from specgen.engine.draft_kinds import draft_kind
    from specgen.models import Qwen3Model

    target = Qwen3Model.create("tiny", seed=0)
    kind = draft_kind(draft)
    eng = kind.engine(
        target, kind.create(target), mode="baseline", width=4, batch=2, block_size=16, block_table_width=8
    )
    eng.run([[1, 2, 3], [4, 5]], steps=2)
    before = {n: t.clone() for n, t in eng.bufs.items() if isinstance(t, torch.Tensor)}
    got = host_clock.host_families(eng, repeats=3)
    tail = ("greedy_prefix_verify", "prepare_next_draft")
    families = ("spec_verify_head_update", *(tail if draft == "mtp" else ()))
    assert set(got) == {f"host_family.{f}" for f in families}
    assert all(len(v) == 3 and all(us > 0 for us in v) for v in got.values())
    assert all(torch.equal(before[n], eng.bufs[n]) for n in before)
    assert set(host_clock.HOST_FAMILY_METHOD) == {f"host_family.{f}" for f in ("spec_verify_head_update", *tail)}


def test_a_host_family_clock_that_fails_leaves_the_profiled_figures_and_says_why(monkeypatch):
    from specgen.bench import host_clock
    from specgen.engine.draft_kinds import draft_kind
    from specgen.models import Qwen3Model

    target = Qwen3Model.create("tiny", seed=0)
    kind = draft_kind("mtp")
    eng = kind.engine(
        target, kind.create(target), mode="baseline", width=3, batch=1, block_size=16, block_table_width=8
    )
    eng.run([[1, 2, 3]], steps=1)

    def boom(engine, repeats):
        raise KeyError("state_slots")

    monkeypatch.setattr(host_clock, "host_families", boom)
    clock = host_clock.HostClock(True, repeats=2)
    clock.measure(eng)
    assert clock.samples[1]["issue.h2d"] and not any(k.startswith("host_family") for k in clock.samples[1])
    why = clock.provenance()["not_measured"]["host_family.*"]
    assert "state_slots" in why and "Baseline" in why
    profiled = {1: {"host_family.spec_verify_head_update": [7.0]}}
    doc = cal.costs(profiled, {}, clock.samples, clock.provenance())
    assert doc["host_family"] == {"spec_verify_head_update": 7.0}  # the profiled range stands in
    assert doc["not_measured"]["host_family.*"] == why


def test_in_graph_gap_is_the_idle_between_a_graphs_kernels_back_to_back():
    """Kernels outside the forward that one replay ran one after another on one stream give their gap; a gap
    of 3 us or more (a wait), another replay's kernel, another stream and the forward's kernels give none."""
    ev = [
        _x("user_annotation", kt.phase_name("draft", 0), 0.0, 20.0),
        _x("cuda_runtime", "cudaGraphLaunch", 1.0, 5.0, 10),
        _x("kernel", "draft_mtp", 10.0, 50.0, 10),
        _x("user_annotation", kt.phase_name("verify", 0), 70.0, 200.0),
        _x("cuda_runtime", "cudaGraphLaunch", 71.0, 5.0, 20),
        _x("kernel", "head_a", 80.0, 1.0, 20),
        _x("kernel", "head_b", 81.4, 1.0, 20),  # 0.4 us after head_a
        _x("kernel", "head_c", 82.9, 1.0, 20),  # 0.5 us after head_b
        _x("kernel", "head_d", 88.9, 1.0, 20),  # 5 us: a wait, left out
        _x("kernel", "side", 90.0, 1.0, 20, stream=9),  # alone on its stream
        _x("kernel", "gemm", 90.3, 40.0, 20),  # the forward: its gaps are not the graph's hand-over
        _x("kernel", "attn", 130.6, 30.0, 20),
        _x("cuda_runtime", "cudaLaunchKernel", 150.0, 5.0, 30),
        _x("kernel", "tail_eager", 161.0, 1.0, 30),  # not a graph's
    ]
    s = cal.samples(ev, FORWARD, ["draft_mtp"])
    assert s["in_graph_gap"] == pytest.approx([0.4, 0.5])
    doc = cal.costs({1: s}, {"command": "test"})
    assert doc["in_graph_gap"] == pytest.approx(0.45) and doc["method"]["in_graph_gap"] == "kernel_trace"
