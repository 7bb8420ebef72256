"""The serving loop with the target split over two gloo ranks (CPU): every request exact and the ranks in step.

Requests arrive all at once, so the scheduler's decisions depend only on the tokens, which every rank
computes alike (the vocabulary-parallel argmax): the ranks run the same steps and their collectives pair up.
Each rank's outputs must equal plain greedy decoding of each prompt alone (cut at its stop token or budget),
under churn (a small pool that preempts) in baseline and specgen, with the MTP body whole and split; sampled
requests equal a one-device sampling engine's tokens.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
from oracles.serving import cut_at_stop, frequent_tokens

from specgen.engine import SpecDecodeEngine, greedy_generate
from specgen.models import MTPHead, Qwen3Model
from specgen.parallel.launch import launch
from specgen.runtime.sampling import SamplingParams

WORKER = Path(__file__).with_name("tp_serve_worker.py")
TIMEOUT_S = 300


def _requests(model, n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    stops = sorted(frequent_tokens(model))
    return [
        {
            "prompt": [rng.randrange(model.config.vocab_size) for _ in range(rng.randint(1, 20))],
            "budget": rng.randint(1, 24),
            "stops": stops,
        }
        for _ in range(n)
    ]


@pytest.mark.parametrize("draft_tp", [1, 2])
def test_tp2_serving_equals_greedy_on_every_rank(engine_kernels, tmp_path, draft_tp):
    whole = Qwen3Model.create("tiny", seed=0)
    reqs = _requests(whole, 14, seed=7 + draft_tp)
    job = {
        "kernels": str(engine_kernels.root),
        "requests": reqs,
        "modes": ["baseline", "specgen"],
        "draft_tp": draft_tp,
    }
    (tmp_path / "job.json").write_text(json.dumps(job))
    rc = launch([sys.executable, str(WORKER), str(tmp_path / "job.json")], 2, timeout=TIMEOUT_S)
    assert rc == 0, f"a rank failed or hung (exit {rc})"
    outs = [json.loads((tmp_path / f"serve_{r}.json").read_text()) for r in range(2)]
    want = {
        str(i): cut_at_stop(greedy_generate(whole, [r["prompt"]], r["budget"])[0], set(r["stops"]))
        for i, r in enumerate(reqs)
    }
    for rank, out in enumerate(outs):
        for mode, run in out["runs"].items():
            assert run["outputs"] == want, f"rank {rank}, {mode}"
            assert run["preemptions"] > 0, f"rank {rank}, {mode}: the pool never ran out"
        assert out["runs"]["specgen"]["fast_path"] == out["runs"]["specgen"]["steps"]
    assert outs[0]["runs"] == outs[1]["runs"]  # the same steps on both ranks


def test_serve_bench_tp2_matches_tp1(tmp_path):
    """``specgen serve-bench --tp 2`` on the CPU launches two gloo ranks; rank 0 writes the same requests' output
    lengths and acceptance as the one-device run of the same command (all at once and a closed loop)."""
    from specgen.cli import main

    args = ["serve-bench", "--model", "tiny", "--device", "cpu", "--rates", "inf", "--closed-loop", "3",
            "--num-requests", "6", "--modes", "baseline,specgen", "--acceptance", "0.7"]  # fmt: skip
    assert main([*args, "--out", str(tmp_path / "tp1")]) == 0
    assert main([*args, "--tp", "2", "--out", str(tmp_path / "tp2")]) == 0
    one, two = (json.loads((tmp_path / d / "serve_bench.json").read_text()) for d in ("tp1", "tp2"))
    assert two["settings"]["tp"] == 2 and one["settings"]["tp"] == 1
    assert [(r["mode"], r["load"]) for r in two["runs"]] == [(r["mode"], r["load"]) for r in one["runs"]]
    for a, b in zip(one["runs"], two["runs"]):
        assert [q["output_len"] for q in a["requests"]] == [q["output_len"] for q in b["requests"]], a["mode"]
        assert a["metrics"]["acceptance"] == b["metrics"]["acceptance"] and b["metrics"]["finished"] == 6


def test_tp2_serves_sampled_requests_as_one_device_does(sampling_kernels, tmp_path):
    """Sampled and greedy requests in one batch, under churn, over two ranks: every request's tokens equal what a
    one-device sampling engine gives it alone (baseline: the host rule over the whole vocabulary), on both ranks."""
    whole = Qwen3Model.create("tiny", seed=0)
    reqs = _requests(whole, 10, seed=11)
    for i, r in enumerate(reqs):
        r["sampling"] = [[0.9, 0, 0.9, 40 + i], None, [1.3, 8, 1.0, -i]][i % 3]
    job = {"kernels": str(sampling_kernels.root), "requests": reqs, "modes": ["baseline", "specgen"]}
    (tmp_path / "job.json").write_text(json.dumps(job))
    rc = launch([sys.executable, str(WORKER), str(tmp_path / "job.json")], 2, timeout=TIMEOUT_S)
    assert rc == 0, f"a rank failed or hung (exit {rc})"
    outs = [json.loads((tmp_path / f"serve_{r}.json").read_text()) for r in range(2)]
    params = [SamplingParams(*r["sampling"]) if r["sampling"] else SamplingParams(0.0) for r in reqs]
    eng = SpecDecodeEngine(whole, MTPHead.create(whole, seed=1), mode="baseline", width=4, batch=len(reqs),
                           block_size=16, block_table_width=8, sampling=params)  # fmt: skip
    alone = eng.run([r["prompt"] for r in reqs], max_new_tokens=max(r["budget"] for r in reqs)).outputs
    eng.close()
    want = {str(i): cut_at_stop(out[: r["budget"]], set(r["stops"])) for i, (r, out) in enumerate(zip(reqs, alone))}
    for rank, out in enumerate(outs):
        for mode, run in out["runs"].items():
            assert run["outputs"] == want, f"rank {rank}, {mode}"
            assert run["preemptions"] > 0, f"rank {rank}, {mode}: the pool never ran out"
        assert out["runs"]["specgen"]["fast_path"] == out["runs"]["specgen"]["steps"]
    assert outs[0]["runs"] == outs[1]["runs"]
