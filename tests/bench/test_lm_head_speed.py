"""``benchmarks/lm_head_speed.py``: cuBLAS against the skinny GEMM on a model's LM head."""

from __future__ import annotations

import json

import pytest
from oracles.scripts import benchmark_module

ls = benchmark_module("lm_head_speed")


def test_the_script_needs_a_cuda_device(monkeypatch, tmp_path):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):
        ls.main(["--out", str(tmp_path / "x.json")])


@pytest.mark.gpu
def test_cuda_lm_head_speed_times_both_and_checks_the_product(tmp_path):
    out = tmp_path / "lm.json"
    argv = ["--model", "qwen3-0.6b", "--rows", "1,32", "--launches", "4", "--repeats", "3", "--out", str(out)]
    assert ls.main(argv) == 0
    doc = json.loads(out.read_text())
    assert (doc["n"], doc["k"]) == (151936, 1024) and [r["m"] for r in doc["rows"]] == [1, 32]
    for r in doc["rows"]:
        assert r["cublas_us"] > 0 and r["skinny_us"] > 0 and r["max_err"] < 0.05
    with pytest.raises(SystemExit):
        ls.main(["--rows", "129", "--out", str(out)])
