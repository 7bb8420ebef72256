"""The skinny GEMM's measured tiles: ``TUNED`` is the recorded H200 sweep's table, and every entry is a tile the
kernel can run (the sweep kept only configs whose product matched ``x @ w.T``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

SWEEP = Path(__file__).parents[2] / "benchmarks" / "results" / "skinny_gemm" / "sweep_qwen3.5-2b.json"


@pytest.fixture(scope="module")
def skinny():
    pytest.importorskip("triton")
    from specgen.models import skinny_gemm

    return skinny_gemm


def test_tuned_is_the_recorded_sweep(skinny):
    rec = json.loads(SWEEP.read_text())
    want = {}
    for key, cfg in rec["table"].items():
        n, k, partial = key.split(",")
        want[(int(n), int(k), partial == "True")] = skinny.Config(*cfg)
    assert skinny.TUNED == want
    assert rec["cold_mb"] > 50  # weights cycled past the H200's 50 MB L2, as a forward streams them


def test_a_table_file_replaces_entries_and_float32_keeps_the_heuristic(skinny, tmp_path, monkeypatch):
    table = tmp_path / "sweep.json"
    table.write_text(json.dumps({"table": {"2048,6144,True": [16, 256, 2, 4, 2]}}))
    assert skinny.config_for(2048, 6144, True) == skinny.TUNED[(2048, 6144, True)]
    monkeypatch.setenv("SPECGEN_SKINNY_TABLE", str(table))
    assert skinny.config_for(2048, 6144, True) == skinny.Config(16, 256, 2, 4, 2)
    # an unmeasured shape, and the tests' float32, take the heuristic
    assert skinny.config_for(96, 200, False) == skinny.heuristic(96, 200, False)
    assert skinny.config_for(2048, 6144, True, dtype=torch.float32).stages == 2
    # a product that may not take partials does not borrow the partial shape's split
    assert skinny.config_for(2048, 2048, False) == skinny.heuristic(2048, 2048, False)


def test_the_sweep_takes_the_lm_head_s_shape_when_asked():
    """``skinny_gemm_sweep.py --lm-head``: the vocabulary x hidden product joins the model's shapes (a dense
    Qwen3's and a hybrid's), after them; without the flag the list is the layers' alone."""
    from tests.oracles.scripts import benchmark_module

    sweep = benchmark_module("skinny_gemm_sweep")
    for model, vocab, hidden in (("qwen3-0.6b", 151936, 1024), ("qwen3.5-2b", 248320, 2048)):
        plain, with_head = sweep.shapes(model), sweep.shapes(model, lm_head=True)
        assert with_head[:-1] == plain and with_head[-1] == ("lm_head", vocab, hidden, False)
        assert all(name != "lm_head" for name, *_ in plain)


def test_the_tall_grid_is_valid_and_splits_only_partial_products():
    """``--tall``'s configs: every one a tile the kernel takes (block widths and K steps powers of two, K steps
    a multiple of 16), splits only where the consumer sums partials, and both kinds of product have several."""
    from tests.oracles.scripts import benchmark_module

    sweep = benchmark_module("skinny_gemm_sweep")
    whole, partial = list(sweep.tall_grid(False)), list(sweep.tall_grid(True))
    assert len(whole) >= 4 and len(partial) == 3 * len(whole)
    assert {c.splits for c in whole} == {1} and {c.splits for c in partial} == {1, 2, 4}
    for c in partial:
        assert c.block_n & (c.block_n - 1) == 0 and c.block_k & (c.block_k - 1) == 0 and c.block_k % 16 == 0, c
        assert c.warps in (4, 8) and c.stages >= 1, c
