"""The fast (Triton) forward against the torch forward and torch references.

On the CPU the kernels run in Triton's interpreter (``TRITON_INTERPRET=1``,
set in a child process so it never leaks into a CUDA run); on a GPU they run
compiled, in float32 and bfloat16.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from oracles.scripts import run_case_script

from specgen.models import cuda_forward
from specgen.models.paged_kv import BlockAllocator, make_block_table, verify_metadata
from specgen.models.qwen3 import ModelConfig, Qwen3Model

CASES = Path(__file__).with_name("cuda_forward_cases.py")
TOL = {
    "float32": {"attn": 1e-4, "rope": 1e-4, "elem": 1e-4, "forward": 1e-3, "skinny": 1e-4},
    "bfloat16": {"attn": 3e-2, "rope": 6e-2, "elem": 6e-2, "forward": None, "skinny": 3e-2},
}


def run_cases(device: str, dtype: str, interpret: bool) -> dict:
    return run_case_script(CASES, device, dtype, interpret=interpret)


def check(cases: dict, dtype: str) -> None:
    tol = TOL[dtype]
    for name, c in cases.items():
        if name.startswith("attn"):
            assert c["finite"] and c["err"] < tol["attn"], (name, c)
        elif name.startswith("norm_rope"):
            assert max(c["err_q"], c["err_k"]) < tol["rope"] and c["err_v"] == 0 and c["untouched"], (name, c)
        elif name == "elementwise":
            assert max(c.values()) < tol["elem"], c
        elif name == "block_context":
            assert max(c["err_k"], c["err_v"]) < tol["rope"] and c["untouched"] and c["written"], c
            assert c["context_kv_is_stored"] and c["staged_is_stored"], c
        elif name == "skinny":
            assert c["err"] < tol["skinny"] and max(c["splits"]) > 1, c
        elif name.startswith("forward") and tol["forward"] is not None:
            assert max(c["err_hidden"], c["err_logits"], c["err_kv"]) < tol["forward"] and c["same_tokens"], c
    assert cases["attn_split"]["splits"] > 1 and cases["attn_largest"]["splits"] == 1  # both paths ran
    assert cases["attn_prefill_tiles"]["tiles"] > 1


def test_triton_kernels_match_torch_interpreted():
    pytest.importorskip("triton")
    check(run_cases("cpu", "float32", interpret=True), "float32")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_triton_kernels_match_torch_cuda(dtype):
    check(run_cases("cuda", dtype, interpret=False), dtype)


def test_forward_kernel_choice():
    assert not cuda_forward.use_triton("auto", torch.device("cpu"))
    assert not cuda_forward.use_triton("torch", torch.device("cuda"))
    with pytest.raises(ValueError, match="forward_kernels must be one of"):
        cuda_forward.use_triton("fast", torch.device("cpu"))


def test_fused_weight_views_follow_loads_and_replacement():
    cfg = ModelConfig("t", 1, 32, 4, 2, 8, 48, 64)
    m = Qwen3Model.create(cfg, seed=0)
    attn = m.layers[0].self_attn
    want = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]).clone()
    fused = cuda_forward.fused_weight(attn, ("q_proj", "k_proj", "v_proj"))
    assert torch.equal(fused, want)
    assert cuda_forward.fused_weight(attn, ("q_proj", "k_proj", "v_proj")) is fused  # made once
    with torch.no_grad():  # a checkpoint load writes the parts: the fused tensor sees it
        attn.k_proj.weight.copy_(torch.full_like(attn.k_proj.weight, 3.0))
    assert (fused[32:48] == 3.0).all() and torch.equal(fused[:32], want[:32])
    attn.v_proj = torch.nn.Linear(32, 16, bias=False)  # a replaced part: fused again
    again = cuda_forward.fused_weight(attn, ("q_proj", "k_proj", "v_proj"))
    assert again is not fused and torch.equal(again[48:], attn.v_proj.weight)


def test_torch_forward_is_unchanged_by_fusing():
    """Fusing re-points the parameters; the torch forward must give the same bits afterwards."""
    cfg = ModelConfig("t", 2, 64, 4, 2, 16, 128, 512)
    m = Qwen3Model.create(cfg, seed=1)
    bt = make_block_table(BlockAllocator(16, seed=0), 2, 4)
    seq = torch.tensor([3, 9], dtype=torch.int32)
    pos, slots, kvl, qsl = verify_metadata(seq, bt, 4, 16)
    toks = torch.arange(8) * 7
    m.allocate_kv_cache(16, 16, 4)
    before = m(toks, pos, slots, bt, kvl, qsl, 4)[1]
    for layer in m.layers:
        cuda_forward.fused_weight(layer.self_attn, ("q_proj", "k_proj", "v_proj"))
        cuda_forward.fused_weight(layer.mlp, ("gate_proj", "up_proj"))
    m.allocate_kv_cache(16, 16, 4)
    assert torch.equal(m(toks, pos, slots, bt, kvl, qsl, 4)[1], before)
