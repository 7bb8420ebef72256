"""benchmarks/bench_tables.py: the tables of docs/results.md from a bench result, the boundary goal judged per row."""

from __future__ import annotations

import json

import pytest
from oracles.scripts import benchmark_module


def _module(name: str = "bench_tables"):
    return benchmark_module(name)


def _run(mode, batch, tpot, d2v, bare=5.0, head=2.0):
    return {
        "mode": mode,
        "depth": 3,
        "batch": batch,
        "tpot_ms": tpot,
        "kernel_draft_to_verify_us": d2v,
        "bare_kernel_draft_to_verify_us": bare,
        "head_us": head,
        "kernel_verify_to_draft_us": 10.0,
        "bare_verify_us": 1000.0,
        "draft_us": 500.0,
        "capture_s": 0.1,
        "acceptance": 0.5,
    }


def test_tables_judge_the_boundary_goal(tmp_path, capsys):
    result = {
        "model": "toy",
        "runs": [
            _run("compile", 1, 2.0, 14.0),
            _run("specgen", 1, 1.5, 7.5),
            _run("compile", 8, 2.0, 6.0),
            _run("specgen", 8, 1.9, 9.0),
            {"mode": "baseline", "depth": 3, "batch": 8, "error": "boom"},
        ],
    }
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(result))
    assert _module().main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "| 1 | 2.000 / 1.500 | -25.0% |" in out
    assert "| toy | 3 | 1 | 7.5 | 5.0 | 2.5 (yes) | 14.0 | yes | 2.0 |" in out
    assert "| toy | 3 | 8 | 9.0 | 5.0 | 4.0 (**no**) | 6.0 | **no** | 2.0 |" in out
    assert "boom" not in out


def test_host_step_cost_times_both_plans(engine_kernels, tmp_path):
    """benchmarks/host_step_cost.py: the decision is timed for the plan as built and the hoisted one."""
    mod = _module("host_step_cost")
    out = tmp_path / "cost.json"
    assert mod.main(["--kernels", str(engine_kernels.root), "--calls", "3", "--repeats", "2", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["kernels"], r["case"], r["reason"]) for r in rows] == [
        (2, "guards hold", None),  # the head composite and the tail composite
        (2, "a guard fails", "guard_failed"),
        (4, "guards hold", None),  # the head split beside the draft: token update, metadata, tiling; the tail
        (4, "a guard fails", "guard_failed"),
    ]
    assert all(r["us_per_step"] > 0 and len(r["runs_us"]) == 2 for r in rows)


def test_replay_us_times_inner_calls_after_the_warm_ones():
    """The benchmarks' replay timer (engine/clock.py), on the host clock: every call is counted once,
    the warm calls are not timed, and the figure is per call."""
    import time

    from specgen.engine.clock import replay_us

    calls = []
    us = replay_us(lambda: (calls.append(1), time.sleep(0.002)), repeats=3, inner=4, warm=2, cuda=False)
    assert len(calls) == 2 + 3 * 4
    assert 1500 < us < 20000  # one 2 ms call, not four


def test_prefill_speed_times_each_row_count_and_the_lm_head(tmp_path, capsys):
    """benchmarks/prefill_speed.py on the tiny presets (CPU): a line and a JSON entry per row count, the LM head
    over every row and over the last one timed apart, the command recorded; a hybrid target runs too."""
    prefill_speed = _module("prefill_speed")
    out = tmp_path / "prefill.json"
    assert prefill_speed.main(["--model", "tiny", "--rows", "8,40", "--repeats", "1", "--out", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert [r["rows"] for r in saved["results"]] == [8, 40] and saved["command"].endswith(str(out))
    for r in saved["results"]:
        assert r["wall_us"] > 0 and r["lm_head_all_rows_us"] > 0 and r["lm_head_last_row_us"] > 0
        assert r["kernels"] == [] and r["kernel_us"] is None  # no kernel trace on the CPU
    assert "tiny float32 prefill of 40 rows" in capsys.readouterr().out
    assert prefill_speed.main(["--model", "qwen3.5-tiny", "--rows", "24", "--repeats", "1"]) == 0


def test_sweep_agreement_compares_the_shared_cells(tmp_path, capsys):
    """benchmarks/sweep_agreement.py: the runs two sweeps share, figure by figure, judged at the tolerance."""
    agree = _module("sweep_agreement")

    def sweep(name, runs):
        path = tmp_path / name / "bench.json"
        path.parent.mkdir()
        path.write_text(json.dumps({"runs": runs}))
        return path

    four = sweep(
        "four",
        [
            _run("baseline", 1, 1.2, 300.0),
            _run("specgen", 1, 0.7, 4.0),
            _run("specgen", 8, 0.9, 4.5),
            {"mode": "specgen", "depth": 3, "batch": 32, "error": "out of memory"},
        ],
    )
    one = sweep("one", [_run("specgen", 1, 0.7, 4.6), _run("specgen", 8, 0.9, 6.0, head=2.2)])
    out = tmp_path / "agreement.json"
    assert agree.main([str(four), str(one), "--out", str(out)]) == 1  # B = 8's draft->verify is 1.5 us apart
    text = capsys.readouterr().out
    assert "| specgen | 3 | 8 | kernel_draft_to_verify_us | 4.5 | 6.0 | +1.500 | **no** |" in text
    assert "5/6 cells within 1.0 us" in text  # two cells x three figures; baseline is not in the second sweep
    rows = json.loads(out.read_text())["rows"]
    assert {(r["batch"], r["figure"]) for r in rows if not r["agrees"]} == {(8, "kernel_draft_to_verify_us")}
    assert agree.main([str(four), str(one), "--tolerance-us", "2"]) == 0
    assert agree.main([str(four), str(sweep("none", [_run("inductor", 1, 0.7, 4.0)]))]) == 2


@pytest.mark.parametrize("depth", [3, 5])
def test_the_recorded_one_mode_sweep_agrees_with_the_four_mode_sweep(capsys, depth):
    """The agreement check at 18d96fb (one H100, one process each): specgen's kernel-level figures in the four-mode
    sweep and in a sweep of specgen alone are within 1 us in every cell (issue 25)."""
    from pathlib import Path

    import specgen

    agree = _module("sweep_agreement")
    folder = Path(specgen.__file__).parent / "benchmarks/results/performance/sweep_314ce70_h100/agreement_18d96fb"
    four, one = folder / f"bench_qwen3-0.6b_d{depth}/bench.json", folder / "bench_one_mode/bench.json"
    assert agree.main([str(four), str(one)]) == 0
    assert "9/9 cells within 1.0 us" in capsys.readouterr().out


def test_tree_ab_reads_any_two_labels(tmp_path, capsys):
    """benchmarks/tree_ab.py: medians per label over the rounds (``on_<r>`` / ``off_<r>``: the guard A/B)."""
    ab = _module("tree_ab")
    for label, tpots in (("on", (0.70, 0.72, 0.71)), ("off", (0.69, 0.70, 0.68))):
        for r, tpot in enumerate(tpots, 1):
            run = dict(_run("specgen", 1, tpot, 4.0), step_us=1000 * tpot, equals_target_reference=True)
            (tmp_path / f"{label}_{r}").mkdir()
            (tmp_path / f"{label}_{r}" / "bench.json").write_text(json.dumps({"runs": [run]}))
    ab.main(tmp_path, "on", "off")
    text = capsys.readouterr().out
    assert "| mode | depth | B | figure | on | off | change |" in text
    assert "| specgen | 3 | 1 | tpot_ms | 0.71 | 0.69 | -2.8% |" in text
    rows = json.loads((tmp_path / "ab.json").read_text())
    assert {"figure": "lossless", "on": True, "off": True}.items() <= rows[-1].items()
    assert "post_verify_idle_us" not in text  # an MTP run has no block-draft figures: no row for them
    for label in ("on", "off"):  # a block draft's run carries them
        for r in (1, 2, 3):
            f = tmp_path / f"{label}_{r}" / "bench.json"
            runs = json.loads(f.read_text())["runs"]
            runs[0]["post_verify_idle_us"] = 30.0 if label == "on" else 3.0 + r
            f.write_text(json.dumps({"runs": runs}))
    ab.main(tmp_path, "on", "off")
    assert "| specgen | 3 | 1 | post_verify_idle_us | 30.0 | 5.0 | -83.3% |" in capsys.readouterr().out


def _step_trace(slow: float = 0.0, extra: bool = False, steps: int = 3) -> dict:
    """A Chrome trace of ``steps`` graph steps (draft then verify phase, one stream), the forward's second
    kernel ``slow`` us longer; ``extra``: one more kernel after the forward and a side-stream record."""
    ev, t, corr = [], 1000.0, 1

    def x(cat, name, ts, dur, tid=1, c=None):
        e = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": tid}
        if c is not None:
            e["args"] = {"correlation": c}
        ev.append(e)

    for k in range(steps):
        x("user_annotation", f"specgen::draft#{k}", t, 5.0)
        x("cuda_runtime", "cudaGraphLaunch", t + 1, 2, c=corr)
        x("kernel", "draft_a", t + 10, 4.0, c=corr)
        corr += 1
        x("user_annotation", f"specgen::verify#{k}", t + 6, 3.0)
        x("cuda_runtime", "cudaGraphLaunch", t + 7, 2, c=corr)
        dev = t + 15
        for name, dur in (("head", 2.0), ("gemm", 10.0 + slow), ("attn", 8.0)):
            x("kernel", name, dev, dur, c=corr)
            dev += dur + 0.5
        if extra:
            x("kernel", "fold", dev, 1.5, c=corr)
            x("kernel", "side_check", t + 15, 5.0, tid=2, c=corr)
            dev += 2.0
        corr += 1
        t = dev + 5
    return {"traceEvents": ev}


def test_trace_diff_lines_up_two_runs_of_one_step(tmp_path, capsys):
    """benchmarks/trace_diff.py: per position of the main stream, what moved; what only one run has."""
    from specgen.bench.profiler import write_trace

    diff = _module("trace_diff")
    row = {"mode": "specgen", "depth": 3, "batch": 1}
    a, b = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    write_trace(a, _step_trace(), ["head", "gemm", "attn"], row)
    write_trace(b, _step_trace(slow=2.0, extra=True), ["head", "gemm", "attn"], row)
    pa, pb = diff.profile(a), diff.profile(b)
    assert [p["name"] for p in pa["positions"]] == ["draft_a", "head", "gemm", "attn"]
    assert pa["other_streams"]["records"] == 0 and pb["other_streams"]["device_us"] == 5.0
    rows = diff.compare(pa, pb, 0.3)
    assert [(r["name"], r.get("only")) for r in rows] == [("gemm", None), ("fold", "b")]
    assert rows[0]["dur_b"] - rows[0]["dur_a"] == 2.0
    assert diff.main([str(a), str(b), "--out", str(tmp_path / "d.json")]) == 0
    text = capsys.readouterr().out
    assert "| 2 | gemm | 10.00 | 12.00 | 0.50 | 0.50 |" in text and "fold (only B)" in text
    assert diff.compare(pa, pa, 0.0) == []  # a run against itself: nothing moved
