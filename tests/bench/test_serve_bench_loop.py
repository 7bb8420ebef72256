"""``specgen serve-bench`` end to end on the CPU: the tiny preset served by the engine's serving loop in the
baseline and specgen modes, a handful of requests, the engine tests' kernel folder (widths 2..6, bt8, bs16)."""

from __future__ import annotations

import json

import pytest

from specgen.cli import main


@pytest.mark.slow
def test_serve_bench_runs_the_serving_loop_on_the_cpu(engine_kernels, tmp_path, capsys):
    argv = ["serve-bench", "--model", "tiny", "--device", "cpu", "--depth", "3", "--num-requests", "4",
            "--prompt-len", "fixed:8", "--output-len", "uniform:3-6", "--rates", "inf", "--closed-loop", "2",
            "--stop-id", "7", "--max-batch", "3", "--block-size", "16", "--block-table-width", "8",
            "--kernels", str(engine_kernels.root), "--out", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "serve-bench: run 4/4: specgen at closed 2: finished" in err
    data = json.loads((tmp_path / "serve_bench.json").read_text())
    assert [(r["load"], r["mode"]) for r in data["runs"]] == [
        ("inf", "baseline"), ("inf", "specgen"), ("closed 2", "baseline"), ("closed 2", "specgen"),
    ]  # fmt: skip
    for r in data["runs"]:
        m = r["metrics"]
        assert m["finished"] == m["requests"] == 4, r["mode"]
        assert m["output_tokens"] == sum(q["output_len"] for q in r["requests"]) > 0
        assert m["decode_steps"] > 0 and m["ttft_s"]["p50"] > 0
        assert all(q["finish"] in ("stop", "length") for q in r["requests"])
    assert data["runs"][2]["in_flight"] == 2
    by_mode = {r["mode"]: r for r in data["runs"][:2]}
    # the same requests, decoded greedily in both modes: the same number of tokens each
    assert [q["output_len"] for q in by_mode["baseline"]["requests"]] == [
        q["output_len"] for q in by_mode["specgen"]["requests"]
    ]
    assert {"timeline.png", "latency_vs_rate.png"} <= {p.name for p in tmp_path.iterdir()}
    assert "inf  baseline" in out and "inf   specgen" in out


@pytest.mark.slow
def test_serve_bench_serves_sampled_requests(sampling_kernels, tmp_path, capsys):
    """--temperature with --sampled-share: half the requests sample (each with its own seed), the rest greedy; in
    both modes each request gives the same tokens, so the same lengths."""
    argv = ["serve-bench", "--model", "tiny", "--device", "cpu", "--depth", "3", "--num-requests", "4",
            "--prompt-len", "uniform:2-9", "--output-len", "uniform:3-6", "--rates", "inf", "--max-batch", "3",
            "--temperature", "0.8", "--top-p", "0.9", "--sampled-share", "0.5", "--seed", "4",
            "--block-size", "16", "--block-table-width", "8",
            "--kernels", str(sampling_kernels.root), "--out", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    data = json.loads((tmp_path / "serve_bench.json").read_text())
    assert [r["mode"] for r in data["runs"]] == ["baseline", "specgen"]
    assert all(r["metrics"]["finished"] == 4 for r in data["runs"])
    lens = [[q["output_len"] for q in r["requests"]] for r in data["runs"]]
    assert lens[0] == lens[1]
