"""Tensor parallelism on the CPU: two gloo ranks against one device.

The two ranks are started once (``launch``: torchrun's environment, a timeout
so a hang fails the test) and run every case; the tests compare what they
wrote with the single-device engine and plain greedy decoding here.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from oracles.tp_jobs import HORIZON, NEW, TIMEOUT_S, case, check_ranks_caught, run_ranks

from specgen.engine import SpecDecodeEngine, greedy_generate
from specgen.engine.acceptance import AcceptanceMix
from specgen.models import MTPHead, Qwen3Model

MODES = ("baseline", "compile", "specgen")
GPU_TIMEOUT_S = 500  # inductor compiles the compile mode's updates for seven shapes on each rank


def cpu_cases() -> list[dict]:
    """Every mode, widths 2-6, batches 1 and 3; two with the draft body split over the ranks too."""
    return [case(m, w, b) for m in MODES for w in range(2, 7) for b in (1, 3)] + [
        case("specgen", 4, 3, draft_tp=2),
        case("baseline", 3, 1, draft_tp=2),
    ]


@pytest.fixture(scope="module")
def tp_job(engine_kernels, tmp_path_factory):
    """Both ranks' results, from one launch of two gloo ranks."""
    return run_ranks(tmp_path_factory.mktemp("tp"), engine_kernels, cpu_cases(), (1, 3))


@pytest.fixture(scope="module")
def tp1(engine_kernels):
    """The single-device model and its plain greedy tokens per prompt set."""
    m = Qwen3Model.create("tiny", seed=0)
    return m, MTPHead.create(m, seed=1)


def test_vocab_parallel_argmax_breaks_ties_like_argmax(tp_job):
    _, outs = tp_job
    for out in outs:
        assert out["argmax"] == [True] * 6


def test_tp2_greedy_equals_tp1_greedy(tp_job, tp1):
    job, outs = tp_job
    for key, prompts in job["prompts"].items():
        exp = greedy_generate(tp1[0], prompts, HORIZON)
        assert outs[0]["greedy"][key] == exp == outs[1]["greedy"][key], key


@pytest.mark.parametrize("mode", MODES)
def test_tp2_engine_equals_tp1_engine_and_greedy(tp_job, tp1, engine_kernels, mode):
    job, outs = tp_job
    model, head = tp1
    runs = [(a, b) for a, b in zip(outs[0]["runs"], outs[1]["runs"]) if a["mode"] == mode]
    assert len(runs) >= 10
    for r0, r1 in runs:
        prompts = job["prompts"][r0["prompts"]]
        greedy = greedy_generate(model, prompts, HORIZON)
        mix = None
        if r0["acceptance"] is not None:
            mix = AcceptanceMix(r0["acceptance"], torch.tensor(greedy), model.config.vocab_size, seed=3)
        eng = SpecDecodeEngine(
            model,
            head,
            mode=mode,
            width=r0["width"],
            batch=len(prompts),
            block_size=16,
            block_table_width=8,
            library=engine_kernels,
            compile_backend="eager",
            acceptance=mix,
        )
        single = eng.run(prompts, max_new_tokens=NEW).outputs
        exp = [g[:NEW] for g in greedy]
        assert r0["outputs"] == r1["outputs"] == single == exp, (mode, r0["width"], len(prompts), r0["draft_tp"])
        if mode == "specgen":  # every TP step took the built kernels
            assert r0["stats"]["fallback"] == {} and r0["stats"]["fast_path"] >= 1


def test_check_ranks_names_the_corrupted_field(tp_job):
    check_ranks_caught(tp_job[1], len(cpu_cases()))


def test_bench_tp2_on_cpu(engine_kernels, tmp_path):
    """`specgen bench --model tiny --tp 2` launches its two gloo ranks; rank 0 writes the results."""
    out = tmp_path / "bench"
    cmd = [
        sys.executable,
        "-m",
        "specgen",
        "bench",
        "--model",
        "tiny",
        "--tp",
        "2",
        "--steps",
        "3",
        "--warmup",
        "1",
        "--depth",
        "3",
        "--batch",
        "1,3",
        "--acceptance",
        "0.7",
        "--check",
        "--check-ranks",
        "2",
        "--block-table-width",
        "8",
        "--prompt-len",
        "8",
        "--device",
        "cpu",
        "--kernels",
        str(engine_kernels.root),
        "--out",
        str(out),
    ]
    subprocess.run(cmd, timeout=TIMEOUT_S, check=True)
    result = json.loads((out / "bench.json").read_text())
    assert result["tp"] == 2 and len(result["runs"]) == 4
    for run in result["runs"]:
        assert run["tp"] == 2 and run["equals_target_reference"] and run["equals_greedy"], run


def test_bench_tp_errors(capsys):
    """Fewer GPUs than ranks, or a draft split other than 1 or --tp: one line, exit 2, nothing launched."""
    from specgen.cli import main

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    ask = max(2, n + 1)
    assert main(["bench", "--tp", str(ask), "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    if n == 0:  # no CUDA at all: the device check speaks first
        assert err == "specgen: error: --device cuda: torch sees no CUDA device here; use --device cpu\n"
    else:
        assert f"specgen: error: --tp {ask} needs {ask} GPUs, {n} visible" in err
    assert main(["bench", "--tp", "2", "--draft-tp", "3", "--device", "cpu"]) == 2
    assert "--draft-tp 1 or --tp (2)" in capsys.readouterr().err


@pytest.mark.gpu
def test_cuda_tp2_lossless_and_sync_free(engine_kernels, tmp_path):
    """Two GPUs, NCCL in the captured graphs, float32 without TF32: every mode's tokens equal TP1 greedy
    decoding on both ranks, with the rank check after every step; specgen steps never synchronize."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs (kind nvidia-h200-x2)")
    torch.backends.cuda.matmul.allow_tf32 = False
    cases = [case(m, w, b) for m in ("baseline", "specgen") for w in range(2, 7) for b in (1, 3, 8)]
    cases += [case("compile", w, 3, compile_backend="inductor") for w in range(2, 7)]
    cases += [case("compile", 4, b, compile_backend="inductor") for b in (1, 8)]
    cases += [case("specgen", 4, 3, draft_tp=2)]  # collectives in the draft graph too
    job, outs = run_ranks(tmp_path, engine_kernels, cases, (1, 3, 8), device="cuda", timeout=GPU_TIMEOUT_S)
    model = Qwen3Model.create("tiny", seed=0, device="cuda")
    assert all(out["argmax"] == [True] * 6 for out in outs)
    for r0, r1 in zip(outs[0]["runs"], outs[1]["runs"]):
        exp = [g[:NEW] for g in greedy_generate(model, job["prompts"][r0["prompts"]], NEW)]
        assert r0["outputs"] == r1["outputs"] == exp, (r0["mode"], r0["width"], r0["prompts"])
        least = {"baseline": 2, "compile": 1, "specgen": 0}[r0["mode"]]
        for r in (r0, r1):  # every rank pays the baseline's host synchronizations
            assert min(r["syncs"]) >= least, (r["mode"], r["syncs"])
            if r["mode"] == "specgen":
                assert r["syncs"] == [0, 0, 0] and r["stats"]["fallback"] == {}, r
    check_ranks_caught(outs, len(cases))


def test_whole_logits_gathers_the_ranks_ranges_in_vocabulary_order(tp_job):
    _, outs = tp_job
    assert [out["whole"] for out in outs] == [True, True]
