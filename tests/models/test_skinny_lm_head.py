"""The LM head on the skinny GEMM (``cuda_forward.lm_head``, ``SPECGEN_SKINNY_LM_HEAD``): the switch's parsing, the
kernel's tall tiles (up to 128 rows) against ``x @ w.T``, and every fast forward's logits with the head on it
against the torch forward.  On the CPU the kernels run in Triton's interpreter in a child process
(``skinny_lm_head_cases.py``); on a GPU compiled, at Qwen3-0.6B's head shape in bfloat16, with a captured graph
that must hold no memset node."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from oracles.scripts import run_case_script

from specgen.models import cuda_forward
from specgen.models.paged_kv import BlockAllocator, make_block_table, verify_metadata
from specgen.models.qwen3 import Qwen3Model

CASES = Path(__file__).with_name("skinny_lm_head_cases.py")


def run_cases(device: str, dtype: str, interpret: bool) -> dict:
    return run_case_script(CASES, device, dtype, interpret=interpret)


def check(cases: dict, strict: bool) -> None:
    """Every fast forward's LM head on the skinny GEMM (once a forward, the hybrid's four), and within tolerance:
    float32 (``strict``, IEEE dots) each product and each forward's logits within a few float32 steps; bfloat16 each
    product within twice cuBLAS's error or 1% of its magnitude, the forwards within 6% (as the hybrid's own check),
    the dense target's not compared (its whole bfloat16 forward rounds apart from torch's, as in
    ``test_cuda_forward``)."""
    gemm = dict(cases["gemm"])
    assert gemm.pop("too_many") == "skinny_gemm takes at most 128 rows, not 129"
    check_out(cases["out"], strict)
    check_tiles(cases["tiles"])
    for m, c in gemm.items():
        bound = 1e-5 * c["scale"] if strict else max(2 * c["err_cublas"], 1e-2 * c["scale"])
        assert c["shape"][0] == int(m) and c["err"] <= bound, (m, c)
    rel = 1e-5 if strict else 6e-2
    assert cases["dense"]["head_calls"] == 1, cases["dense"]
    if strict:
        assert cases["dense"]["err_logits"] < 1e-3 and cases["dense"]["same_tokens"], cases["dense"]
    for name in ("mtp", "block"):
        c = cases[name]
        assert c["head_calls"] == 1 and c["err_logits"] <= rel * c["scale"], (name, c)
    check_tall(cases["tall"], strict)
    hybrid = cases["hybrid"]
    assert hybrid["head_calls"] == 4, hybrid
    for name in ("prefill", "verify", "head", "head_chained"):
        c = hybrid[name]
        assert c["err_logits"] <= rel * c["scale"] and (c["same_tokens"] or not strict), (name, c)


def check_tall(case: dict, strict: bool) -> None:
    """A 24-row verify step with every layer shape in the tall table: each layer's four products (q/k/v, o,
    gate-up, down) on the skinny GEMM, the o and down products asked as partial sums, and the step as close to the
    torch forward as the 12-row step of ``test_cuda_forward`` (float32: within 1e-3, the same tokens)."""
    assert case["tall_calls"] == 2 * 4, case  # the tiny dense model's 2 layers, 4 products each; the head cuBLAS
    assert [tuple(a) for a in case["asked"]] == [(64, 64, True), (64, 128, True), (128, 64, False), (256, 64, False)]
    if strict:
        assert max(case["err_hidden"], case["err_logits"], case["err_kv"]) < 1e-3 and case["same_tokens"], case
    else:  # bfloat16: the dense forward rounds apart from torch's (not compared in test_cuda_forward either)
        assert math.isfinite(case["err_logits"]) and math.isfinite(case["err_hidden"]), case


def check_tiles(cases: dict) -> None:
    """The skinny head's tiles equal ``logit_tiles_of`` its logits at every row count (NaN logits among them); every
    other head marks its rows unset; a wrong shape is an error that says what was wanted."""
    res = dict(cases)
    bad = res.pop("bad")
    assert bad["lm_head"].startswith("lm_head writes int64 [") and "tiles, not into" in bad["lm_head"], bad
    assert bad["skinny"].startswith("skinny_gemm writes contiguous int64 [1,") and "tiles" in bad["skinny"], bad
    assert bad["partial"].startswith("skinny_gemm writes contiguous int64"), bad
    assert res.pop("past_limit_unset") is True
    for m, c in res.items():
        assert c["equal"] and c["torch_unset"] and c["nan"] >= int(m), (m, c)


def check_out(cases: dict, strict: bool) -> None:
    """The head into a float32 buffer: the buffer itself returned, the next row untouched, the logits within a few
    float32 steps (float32) or no further from the exact product than the head rounded to bfloat16 (their sums are
    never rounded); an out of the wrong shape is an error that says what was wanted."""
    out = dict(cases)
    bad = out.pop("bad")
    assert bad["lm_head"].startswith("lm_head writes [") and "not into" in bad["lm_head"], bad
    assert bad["skinny"].startswith("skinny_gemm writes a contiguous [1,") and "not [2," in bad["skinny"], bad
    assert bad["partial"].startswith("skinny_gemm writes a contiguous"), bad
    for m, c in out.items():
        assert c["same_storage"] and c["row_after_untouched"], (m, c)
        bound = 1e-5 * c["scale"] if strict else c["err_rounded"] + 1e-3 * c["scale"]
        assert c["err"] <= bound, (m, c)
        if not strict:  # bfloat16: the rounded head is visibly further off than the float32 sums
            assert c["err"] < c["err_rounded"], (m, c)


def test_lm_head_on_the_skinny_gemm_interpreted():
    """float32: the skinny head at 1, 16, 17, 32, 100 and 128 rows of a 200 x 300 weight (N and K no multiple of a
    tile), and the tiny forwards with their heads on it."""
    pytest.importorskip("triton")
    check(run_cases("cpu", "float32", interpret=True), strict=True)


@pytest.mark.gpu
def test_lm_head_on_the_skinny_gemm_cuda():
    """bfloat16 at Qwen3-0.6B's head (151936 x 1024) for 1, 4, 8, 32 and 128 rows, the tiny forwards, and a
    captured graph of the skinny head: kernels only, no memset node."""
    res = run_cases("cuda", "bfloat16", interpret=False)
    check(res, strict=False)
    graph = res["graph"]
    assert graph["skinny"].get("KERNEL", 0) >= 1 and "MEMSET" not in graph["skinny"], graph


def test_lm_head_rows_reads_the_switch(monkeypatch):
    monkeypatch.delenv("SPECGEN_SKINNY_LM_HEAD", raising=False)
    monkeypatch.delenv("SPECGEN_SKINNY_GEMM", raising=False)
    assert cuda_forward.lm_head_rows() == cuda_forward.LM_HEAD_ROWS == 64  # the default: heads of up to 64 rows
    for raw, rows in (("32", 32), ("128", 128), ("0", 0), ("", 0)):
        monkeypatch.setenv("SPECGEN_SKINNY_LM_HEAD", raw)
        assert cuda_forward.lm_head_rows() == rows
    for bad in ("abc", "300", "129", "-1", "1.5"):
        monkeypatch.setenv("SPECGEN_SKINNY_LM_HEAD", bad)
        with pytest.raises(ValueError, match=r"SPECGEN_SKINNY_LM_HEAD must be a row limit from 0 to 128"):
            cuda_forward.lm_head_rows()
    monkeypatch.setenv("SPECGEN_SKINNY_LM_HEAD", "64")
    monkeypatch.setenv("SPECGEN_SKINNY_GEMM", "0")  # the skinny GEMM's own off switch turns the head off too
    assert cuda_forward.lm_head_rows() == 0


def test_the_row_limit_and_tiles_match_the_kernel():
    """``cuda_forward`` keeps the kernel's limit without importing Triton; up to 16 rows the launch is as before
    (a 16-row tile, the config untouched, whatever its size), past 16 one tile of the next power of two, with 64-wide
    K steps from 128 rows and no more stages than fit the shared memory."""
    sg = pytest.importorskip("specgen.models.skinny_gemm")
    assert cuda_forward.MAX_HEAD_ROWS == sg.MAX_HEAD_ROWS == 128 and sg.MAX_ROWS == 16
    assert [sg.block_rows(m) for m in (1, 16, 17, 32, 33, 64, 100, 128)] == [16, 16, 32, 32, 64, 64, 128, 128]
    cfg, wide = sg.Config(64, 128, 1, 4, 3), sg.Config(256, 256, 1, 8, 5)
    assert sg.tall(cfg, 16) is cfg and sg.tall(wide, 16) is wide
    assert sg.tall(cfg, 32) == sg.tall(cfg, 64) == cfg and sg.tall(cfg, 128) == sg.Config(64, 64, 1, 4, 3)
    assert sg.tall(wide, 64) == wide._replace(stages=1) and sg.tall(wide, 128) == sg.Config(256, 64, 1, 8, 4)
    assert sg.tall(cfg, 128, elem=4) == sg.Config(64, 64, 1, 4, 3)  # float32: 48 KB a stage


def test_cublas_and_the_torch_forward_are_unchanged(monkeypatch):
    """The switch touches no torch forward (its head is ``F.linear`` whatever it says), and with it off (0 rows, or
    no rows to take) ``lm_head`` is ``F.linear`` bit for bit."""
    model = Qwen3Model.create("tiny", seed=1)
    bt = make_block_table(BlockAllocator(16, seed=0), 2, 4)
    pos, slots, kvl, qsl = verify_metadata(torch.tensor([3, 9], dtype=torch.int32), bt, 4, 16)
    toks = torch.arange(8) * 7
    outs = []
    for limit in ("0", "128"):
        monkeypatch.setenv("SPECGEN_SKINNY_LM_HEAD", limit)
        model.allocate_kv_cache(16, 16, 4)
        outs.append(model(toks, pos, slots, bt, kvl, qsl, 4)[1])
    assert torch.equal(outs[0], outs[1])
    h, w = torch.randn(5, 64), torch.randn(40, 64)
    monkeypatch.setenv("SPECGEN_SKINNY_LM_HEAD", "0")
    assert torch.equal(cuda_forward.lm_head(h, w), torch.nn.functional.linear(h, w))
    monkeypatch.setenv("SPECGEN_SKINNY_LM_HEAD", "128")
    assert cuda_forward.lm_head(h[:0], w).shape == (0, 40)  # no rows: cuBLAS's empty product


def test_the_logit_tile_is_the_vocabulary_pass_tile():
    sg = pytest.importorskip("specgen.models.skinny_gemm")
    from specgen.specializations.vocab_sample import LOGIT_TILE

    assert sg.LOGIT_TILE == LOGIT_TILE
