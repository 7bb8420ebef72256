"""The skinny GEMM's measured tiles: ``TUNED`` is the recorded H200 sweep's table, and every entry is a tile the
kernel can run (the sweep kept only configs whose product matched ``x @ w.T``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

SWEEP = Path(__file__).parents[2] / "benchmarks" / "results" / "skinny_gemm" / "sweep_qwen3.5-2b.json"
TALL_SWEEP = SWEEP.with_name("tall_qwen3.5-2b_h100.json")


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


def test_the_tall_table_keeps_the_shapes_that_beat_cublas():
    """``tall_table``: a shape's best config at its most rows up to the limit, kept only ``TALL_MARGIN`` faster
    than cuBLAS there (JSON's string row keys too); a shape measured only past the limit stays out."""
    from tests.oracles.scripts import benchmark_module

    sweep = benchmark_module("skinny_gemm_sweep")
    fast, slow = [64, 64, 2, 4, 4], [32, 128, 1, 4, 4]
    best = {
        "2048,2048,True": {32: [fast, 10.0, 12.0]},  # 17% faster: kept
        "8224,2048,False": {32: [slow, 11.8, 12.0]},  # 1.7% faster: noise, cuBLAS keeps it
        "5120,2048,False": {"24": [slow, 9.0, 12.0], "64": [fast, 30.0, 12.0]},  # 64 rows past the limit
        "12288,2048,False": {64: [fast, 1.0, 12.0]},  # only past the limit
    }
    assert sweep.tall_table(best, 32) == {"2048,2048,True": fast, "5120,2048,False": slow}
    assert sweep.tall_table(best, 64) == {"2048,2048,True": fast, "12288,2048,False": fast}


def test_tall_rows_take_the_tall_table_and_its_switch(skinny, tmp_path, monkeypatch):
    """17 .. ``TALL_ROWS`` rows take a shape's tall entry (a partial product the whole product's when it has none of
    its own); 16 rows and fewer, and past the limit, the ordinary table; ``SPECGEN_SKINNY_TALL=0`` none."""
    from specgen.models import cuda_forward

    assert cuda_forward.TALL_ROWS == skinny.TALL_ROWS == 32
    tall = skinny.Config(128, 64, 1, 8, 4)
    table = tmp_path / "sweep.json"
    table.write_text(json.dumps({"table": {}, "tall_table": {"1024,6144,False": list(tall)}}))
    monkeypatch.delenv("SPECGEN_SKINNY_TALL", raising=False)
    monkeypatch.delenv("SPECGEN_SKINNY_GEMM", raising=False)
    monkeypatch.setenv("SPECGEN_SKINNY_TABLE", str(table))
    ordinary = skinny.heuristic(1024, 6144, True)  # no measured entry at 16 rows or fewer
    assert skinny.tall_config(1024, 6144, True) == skinny.tall_config(1024, 6144, False) == tall
    assert skinny.tall_config(2048, 4096, True) is None  # the MTP head's fc: cuBLAS was faster
    for rows, want in ((1, ordinary), (16, ordinary), (17, tall), (32, tall), (33, ordinary)):
        assert skinny.config_for(1024, 6144, True, rows=rows) == want, rows
    w, other = torch.empty(1024, 6144), torch.empty(2048, 4096)
    use = cuda_forward._use_skinny
    assert use(torch.empty(16, 1), other) and not use(torch.empty(17, 1), other)  # no tall entry: cuBLAS
    assert use(torch.empty(17, 1), w) and use(torch.empty(32, 1), w, partial=True)
    assert not use(torch.empty(33, 1), w)
    monkeypatch.setenv("SPECGEN_SKINNY_TALL", "0")
    assert skinny.tall_config(1024, 6144, False) is None and skinny.config_for(1024, 6144, True, rows=32) == ordinary
    assert not use(torch.empty(32, 1), w) and use(torch.empty(16, 1), w)
    monkeypatch.setenv("SPECGEN_SKINNY_TALL", "1")
    monkeypatch.setenv("SPECGEN_SKINNY_GEMM", "0")
    assert not use(torch.empty(32, 1), w) and not use(torch.empty(1, 1), w)


def test_tuned_tall_is_the_recorded_tall_sweep(skinny):
    """``TUNED_TALL`` is the recorded ``--tall`` sweep's ``tall_table``, which ``tall_table`` rebuilds from its
    timings; every entry there beat cuBLAS at 32 rows, and every shape left out did not by the margin."""
    from tests.oracles.scripts import benchmark_module

    sweep = benchmark_module("skinny_gemm_sweep")
    rec = json.loads(TALL_SWEEP.read_text())
    assert "--tall" in rec["command"] and rec["cold_mb"] > 50 and rec["rows"] == [32]
    assert sweep.tall_table(rec["tall"], skinny.TALL_ROWS) == rec["tall_table"]
    want = {}
    for key, cfg in rec["tall_table"].items():
        n, k, partial = key.split(",")
        want[(int(n), int(k), partial == "True")] = skinny.Config(*cfg)
    assert skinny.TUNED_TALL == want and len(want) >= 1
    for key, by_rows in rec["tall"].items():
        _, us, cublas = by_rows["32"]
        assert (key in rec["tall_table"]) == (us <= cublas * (1 - sweep.TALL_MARGIN)), key


def test_tuned_tall_entries_are_tiles_the_kernel_takes(skinny):
    """Every ``TUNED_TALL`` config: powers of two, a K step the dot takes, and fitting the shared memory at 32
    rows (``tall`` leaves it as measured)."""
    for key, c in skinny.TUNED_TALL.items():
        assert c.block_n & (c.block_n - 1) == 0 and c.block_k & (c.block_k - 1) == 0 and c.block_k % 16 == 0, key
        assert c.splits == 1 or key[2], key  # splits only where the consumer sums partials
        assert skinny.tall(c, skinny.block_rows(skinny.TALL_ROWS)) == c, key
