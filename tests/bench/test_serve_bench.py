"""``specgen serve-bench``: the sweep, the table, ``serve_bench.json``, the pictures and the progress lines, driven by
a runner that builds ``ServeRun`` records by hand (no model runs here; the options are test_serve_bench_options.py)."""

from __future__ import annotations

import json
import sys

import pytest
from oracles.serve_bench_runs import SMALL, fake_runner, serve_args

from specgen.bench import serve_report
from specgen.bench.serve import workload_for
from specgen.bench.serve_config import ServeSettings
from specgen.cli import serve_bench as cli_serve
from specgen.engine.serving import RequestRecord, ServeRun, StepRecord

# --- the sweep and its output ---------------------------------------------------------------------------------


def test_a_sweep_prints_the_table_and_writes_the_json_and_the_pictures(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SPECGEN_SKINNY_TALL", "0")
    calls = []
    argv = [*SMALL, "--rates", "2,inf", "--closed-loop", "2", "--stop-id", "5", "--out", str(tmp_path)]
    assert cli_serve.run(serve_args(*argv), runner=fake_runner(calls)) == 0
    out, err = capsys.readouterr()
    assert [(m, type(w).__name__) for m, w in calls] == [
        ("baseline", "list"), ("specgen", "list"), ("baseline", "list"), ("specgen", "list"),
        ("baseline", "ClosedLoop"), ("specgen", "ClosedLoop"),
    ]  # fmt: skip
    lines = out.splitlines()
    assert lines[0].split()[:5] == ["load", "mode", "done", "req/s", "tok/s"]
    assert [ln.split()[:3] for ln in lines[2:8]] == [
        ["2/s", "baseline", "4/4"], ["2/s", "specgen", "4/4"], ["inf", "baseline", "4/4"], ["inf", "specgen", "4/4"],
        ["closed", "2", "baseline"], ["closed", "2", "specgen"],
    ]  # fmt: skip
    assert any(ln.startswith("columns:") for ln in lines)
    assert any(ln.startswith("compile: needs CUDA") for ln in lines)
    assert {p.name for p in tmp_path.iterdir()} >= {"serve_bench.json", "latency_vs_rate.png", "timeline.png"}
    for name in ("serve_bench.json", "latency_vs_rate.png", "timeline.png"):
        assert f"wrote {tmp_path / name}" in out
    data = json.loads((tmp_path / "serve_bench.json").read_text())
    assert data["command"] == "specgen serve-bench " + " ".join(argv)
    assert set(data["environment"]) == {"device", "torch", "python", "switches"}
    assert data["environment"]["switches"]["SPECGEN_SKINNY_TALL"] == "0"  # the variant measured, in the file
    s = data["settings"]
    assert (s["num_requests"], s["stop_ids"], s["loads"], s["modes"]) == (4, [5], ["2/s", "inf", "closed 2"],
                                                                         ["baseline", "specgen"])  # fmt: skip
    assert s["prompt_len"] == "fixed:4" and s["device"] == "cpu" and s["dtype"] == "float32"
    assert data["skipped_modes"].keys() == {"compile", "inductor"}
    assert len(data["runs"]) == 6
    run = data["runs"][1]
    assert set(run) == {"load", "wall_s", "mode", "draft", "depth", "rate", "in_flight", "settings", "metrics",
                        "requests", "steps"}  # fmt: skip
    assert (run["load"], run["mode"], run["rate"], run["in_flight"]) == ("2/s", "specgen", 2.0, None)
    assert (data["runs"][4]["rate"], data["runs"][4]["in_flight"]) == (None, 2)
    m = run["metrics"]
    assert m["finished"] == 4 and m["fallbacks"] == {"eager": m["decode_steps"] // 4}
    assert m["tpot_s"]["p50"] == pytest.approx(0.005)  # one token per 5 ms step
    assert data["runs"][0]["metrics"]["fast_path_share"] == 0.0
    for i, (mode, load) in enumerate([("baseline", "2/s"), ("specgen", "2/s")], 1):
        assert f"serve-bench: run {i}/6: {mode} at {load}: started (4 requests)" in err
        assert f"serve-bench: run {i}/6: {mode} at {load}: finished in " in err
    assert "run 6/6: specgen at closed 2: finished" in err


def test_a_long_run_says_it_is_still_running(tmp_path, capsys):
    argv = [*SMALL, "--modes", "baseline", "--out", str(tmp_path), "--progress-every", "0.05"]
    assert cli_serve.run(serve_args(*argv), runner=fake_runner([], slow=0.3)) == 0
    err = capsys.readouterr().err
    assert "serve-bench: run 1/1: baseline at inf: still running, " in err


def test_a_failed_run_is_kept_reported_and_the_status_is_1(tmp_path, capsys):
    argv = [*SMALL, "--rates", "1", "--out", str(tmp_path)]
    assert cli_serve.run(serve_args(*argv), runner=fake_runner([], fail="specgen")) == 1
    out, err = capsys.readouterr()
    assert "specgen: mode specgen failed at load 1/s: RuntimeError: the device went away" in err
    assert "second line" not in err
    runs = json.loads((tmp_path / "serve_bench.json").read_text())["runs"]
    assert runs[1] == {"mode": "specgen", "load": "1/s", "rate": 1.0, "in_flight": None, "wall_s": runs[1]["wall_s"],
                       "error": "RuntimeError: the device went away"}  # fmt: skip


def test_when_no_run_finished_earlier_results_are_left_as_they_were(tmp_path, capsys):
    (tmp_path / "serve_bench.json").write_text("{}")
    argv = [*SMALL, "--modes", "specgen", "--out", str(tmp_path)]
    assert cli_serve.run(serve_args(*argv), runner=fake_runner([], fail="specgen")) == 1
    assert "no run finished" in capsys.readouterr().err
    assert (tmp_path / "serve_bench.json").read_text() == "{}"


def _hand_run(mode: str, rate, load: str) -> dict:
    run = ServeRun(mode=mode, draft="mtp", depth=3, rate=rate, elapsed_s=2.0, preemptions=2)
    run.requests += [
        RequestRecord(0, 0.0, 4, [0.1, 0.2, 0.4], 3, "stop"),
        RequestRecord(1, 0.5, 4, [0.7, 0.8, 0.9], 3, "length"),
        RequestRecord(2, 1.0, 4, [1.5], 1),  # unfinished
    ]
    run.steps += [
        StepRecord(0.1, 1, True, 0, 1, 3, 3),
        StepRecord(0.2, 2, False, 2, 2, 6, 0, reason="bucket", joined=1, remap_path="kernel"),
        StepRecord(0.4, 2, False, 1, 2, 6, 3, reason="guard", remaps=1, remap_path="torch", remap_reason="not_built"),
        StepRecord(0.9, 1, True, 0, 1, 3, 0),
    ]
    return {"load": load, "wall_s": 2.25, **run.to_json()}


def test_a_row_reads_the_runs_figures_in_milliseconds():
    row = serve_report.row(_hand_run("specgen", 2.0, "2/s"))
    assert row == {
        "load": "2/s",
        "mode": "specgen",
        "finished": "2/3",
        "request_throughput": "1.00",  # 2 finished in 2 s
        "output_tokens_per_s": "3.5",  # 7 tokens
        "ttft_ms": "200.0/440.0/494.0",  # ttfts 0.1, 0.2, 0.5
        "tpot_ms": "125.0/145.0/149.5",  # tpots 0.15, 0.1
        "itl_ms": "100.0/170.0/197.0",  # itls 0.1, 0.2, 0.1, 0.1
        "acceptance": "0.33",  # 6 of 18
        "fast_path_share": "0.50",
        "fallbacks": "bucket:1,guard:1",
        "moved": "kernel:1,not_built:1",  # the rows of two steps changed: by the remap kernel, in torch and why
        "preemptions": "2",
        "host_syncs_per_step": "0.75",
        "wall_s": "2.2",
    }
    empty = serve_report.row({"load": "inf", "mode": "baseline", **ServeRun("baseline", "mtp", 3).to_json()})
    assert empty["ttft_ms"] == "" and empty["request_throughput"] == "" and empty["fallbacks"] == "-"
    assert empty["moved"] == "-"


def test_the_pictures_pick_their_loads_and_without_matplotlib_one_line_says_so(tmp_path, capsys, monkeypatch):
    runs = [_hand_run(m, r, lab) for r, lab in ((None, "inf"), (4.0, "4/s"), (1.0, "1/s")) for m in ("a", "b")]
    result = {"model": "tiny", "draft": "mtp", "depth": 3, "runs": runs}
    assert serve_report._loads(runs) == ["1/s", "4/s", "inf"]
    assert serve_report.timeline_load(result) == "4/s"  # the highest rate
    paths = serve_report.write(result, tmp_path)
    assert [p.name for p in paths] == ["serve_bench.json", "latency_vs_rate.png", "timeline.png"]
    assert all(p.stat().st_size > 1000 for p in paths[1:])
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    assert serve_report.write(result, tmp_path) == [tmp_path / "serve_bench.json"]
    assert not (tmp_path / "timeline.png").exists()  # not a picture of an earlier run
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "matplotlib is not installed" in err


def test_settings_the_loop_refuses_are_one_line_and_status_2(tmp_path, capsys):
    from specgen.models.errors import EngineError

    def refuse(mode, load):
        raise EngineError("the serving loop runs the MTP draft only\n(more)")

    assert main_with_runner([*SMALL, "--out", str(tmp_path)], refuse) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == "specgen: error: baseline: the serving loop runs the MTP draft only"


def main_with_runner(argv, runner) -> int:
    """``specgen serve-bench ARGV`` as ``specgen.cli.main`` runs it, with ``runner`` in place of the loop."""
    from specgen.cli.common import UsageError

    try:
        return cli_serve.run(serve_args(*argv), runner=runner)
    except UsageError as e:
        print(f"specgen: error: {e}", file=sys.stderr)
        return 2


def test_finished_runs_are_on_disk_while_the_sweep_goes_on(tmp_path, capsys):
    """After each finished run serve_bench.json holds the runs so far ("partial"), so a sweep that is killed keeps
    them; the last write is the whole result without the mark."""
    seen = []

    def runner(mode, load):
        if mode == "specgen":  # the baseline run finished before: it is already written
            seen.append(json.loads((tmp_path / "serve_bench.json").read_text()))
        return inner(mode, load)

    inner = fake_runner([])
    argv = [*SMALL, "--modes", "baseline,specgen", "--rates", "1", "--out", str(tmp_path)]
    assert cli_serve.run(serve_args(*argv), runner=runner) == 0
    assert seen and seen[0]["partial"] is True and [r["mode"] for r in seen[0]["runs"]] == ["baseline"]
    final = json.loads((tmp_path / "serve_bench.json").read_text())
    assert "partial" not in final and [r["mode"] for r in final["runs"]] == ["baseline", "specgen"]


def test_one_greedy_decode_gives_the_acceptance_oracle_of_every_load(monkeypatch):
    """The loads of a sweep share their requests (only the arrivals differ): the oracle is decoded once, for the
    list and for the closed loop alike, and again only for other requests."""
    import specgen.engine.decode as decode
    from specgen.bench.serve import acceptance_for

    calls = []

    def greedy(model, prompts, n, block_size=16):
        calls.append(len(prompts))
        return [[p[0]] * n for p in prompts]

    monkeypatch.setattr(decode, "greedy_generate", greedy)

    class Model:  # acceptance_for reads the device of the embedding only
        class embed_tokens:
            import torch

            weight = torch.zeros(1)

    c = ServeSettings(device="cpu", num_requests=3, rates="4,inf", closed_loop=2, acceptance=0.5).resolve()
    cache: dict = {}
    mixes = [acceptance_for(Model, c, workload_for(c, load), cache) for load in c.loads]
    assert calls == [3] and len(cache) == 1
    assert all(m.oracle is mixes[0].oracle for m in mixes)
    other = ServeSettings(device="cpu", num_requests=3, rates="4", acceptance=0.5, seed=9).resolve()
    acceptance_for(Model, other, workload_for(other, other.loads[0]), cache)
    assert calls == [3, 3]


def test_an_acceptance_far_below_the_asked_one_is_explained(tmp_path, capsys):
    argv = [*SMALL, "--rates", "1", "--out", str(tmp_path)]
    assert cli_serve.run(serve_args(*argv, "--acceptance", "0.7"), runner=fake_runner([])) == 0
    out = capsys.readouterr().out
    assert "note: the measured acceptance (0.00 in baseline at 1/s) is far below --acceptance 0.7" in out
    assert "--dtype float32" in out
    assert cli_serve.run(serve_args(*argv), runner=fake_runner([])) == 0  # no --acceptance: the draft's own
    assert "note: the measured acceptance" not in capsys.readouterr().out


def test_an_iteration_that_stalled_is_named_with_its_step(tmp_path, capsys):
    """A run whose loop spent longer than ``STALL_S`` in one iteration (a compile inside the timed run) gets a
    note naming the mode, the load and the step; runs without one get none."""
    inner = fake_runner([])

    def runner(mode, load):
        run = inner(mode, load)
        run.longest_iteration_s, run.longest_iteration_step = (2.5, 17) if mode == "specgen" else (0.01, 3)
        return run

    argv = [*SMALL, "--rates", "1", "--modes", "baseline,specgen", "--out", str(tmp_path)]
    assert cli_serve.run(serve_args(*argv), runner=runner) == 0
    out = capsys.readouterr().out
    assert "note: specgen at 1/s stalled 2.50 s in one iteration (step 17)" in out
    assert "note: baseline" not in out
    saved = json.loads((tmp_path / serve_report.RESULT_FILE).read_text())
    m = {r["mode"]: r["metrics"] for r in saved["runs"]}
    assert m["specgen"]["longest_iteration_s"] == 2.5 and m["baseline"]["longest_iteration_step"] == 3


def test_kernels_compiled_inside_a_timed_run_are_counted_and_named(tmp_path, capsys):
    """``jit_compiles`` watches Triton's compile hook while a run goes (and puts the hook back); a run that
    compiled gets a note naming the kernels and the count in its metrics."""
    import types

    from triton import knobs

    from specgen.bench.serve import jit_compiles

    before = knobs.runtime.jit_cache_hook
    with jit_compiles() as names:
        assert knobs.runtime.jit_cache_hook is not before
        assert not knobs.runtime.jit_cache_hook(fn=types.SimpleNamespace(name="_paged_attention_kernel"), repr="r")
    assert names == ["_paged_attention_kernel"] and knobs.runtime.jit_cache_hook is before
    inner = fake_runner([])

    def runner(mode, load):
        run = inner(mode, load)
        run.jit_compiles = ["_silu_mul_kernel", "_silu_mul_kernel"] if mode == "specgen" else []
        return run

    argv = [*SMALL, "--rates", "1", "--modes", "baseline,specgen", "--out", str(tmp_path)]
    assert cli_serve.run(serve_args(*argv), runner=runner) == 0
    out = capsys.readouterr().out
    assert "note: specgen at 1/s JIT-compiled 2 Triton kernel(s) inside the timed run (_silu_mul_kernel)" in out
    assert "note: baseline" not in out
    saved = json.loads((tmp_path / serve_report.RESULT_FILE).read_text())
    m = {r["mode"]: r["metrics"]["jit_compiles"] for r in saved["runs"]}
    assert m == {"baseline": 0, "specgen": 2}


def test_the_profiled_runs_come_after_every_timed_run(tmp_path, capsys):
    """A profiler leaves CUPTI initialized and later launches slower: the first load's profiled run of each mode
    comes after the last timed run, its figures go beside that load's timed run, and a profile that fails
    keeps the timed runs."""
    calls = []
    inner = fake_runner(calls)

    def runner(mode, load):
        return inner(mode, load)

    def profile(mode, load):
        calls.append(("profile", mode))
        if mode == "specgen":
            raise RuntimeError("CUPTI went away")
        return {"gaps": [], "summary": {}, "device_time": None}

    def marks(mode, load):
        calls.append(("marks", mode))
        return {"gaps": [], "summary": {"leave": {"n": 2, "p50_us": 3.0, "max_us": 4.5}}}

    runner.profile, runner.marks = profile, marks
    argv = [*SMALL, "--rates", "2,inf", "--profile-transitions", "4", "--out", str(tmp_path)]
    assert cli_serve.run(serve_args(*argv), runner=runner) == 0
    out, err = capsys.readouterr()
    assert [c[0] for c in calls] == ["baseline", "specgen"] * 2 + ["marks"] * 2 + ["profile"] * 2
    assert [c[1] for c in calls[4:]] == ["baseline", "specgen", "baseline", "specgen"]
    assert "device idle outside the ranges, from timing events (baseline at 2/s, no profiler): leave 3.0 us" in out
    runs = json.loads((tmp_path / "serve_bench.json").read_text())["runs"]
    assert [bool(r.get("transition_idle_marks")) for r in runs] == [True, True, False, False]
    assert [("transition_idle" in r, r["mode"], r["load"]) for r in runs] == [
        (True, "baseline", "2/s"), (False, "specgen", "2/s"), (False, "baseline", "inf"), (False, "specgen", "inf"),
    ]  # fmt: skip
    assert runs[0]["transition_idle"]["run"].endswith("after every timed run")
    assert "serve-bench: specgen at 2/s: the profiled run failed: RuntimeError: CUPTI went away" in err
    assert "serve-bench: baseline at 2/s: profiled in " in err
