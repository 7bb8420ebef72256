"""The skinny GEMM's tall tiles (up to ``MAX_HEAD_ROWS`` rows) and the fast forwards' LM heads on it
(``cuda_forward.lm_head`` under ``SPECGEN_SKINNY_LM_HEAD``), run as a script (``python skinny_lm_head_cases.py
DEVICE DTYPE``) so the CPU run can set ``TRITON_INTERPRET=1`` before Triton is imported; prints one JSON object.

* ``gemm``: ``skinny_gemm`` against ``x.float() @ w.float().T`` at 1 to 128 rows (on CUDA at Qwen3-0.6B's LM head
  shape, cuBLAS's error beside it); 129 rows must raise.
* ``dense``, ``mtp``, ``block``, ``hybrid``: each forward with its fast LM head against the torch forward (the
  dense and hybrid targets through the existing case scripts), and how many LM-head products the skinny GEMM ran.
* ``out``: ``lm_head`` writing into a float32 buffer, on the skinny GEMM and past its row limit.
* ``tiles``: ``lm_head`` writing the logits' tiles beside them, or marking them unset.
* ``graph`` (CUDA): the node kinds of a captured graph of ``lm_head``, skinny and cuBLAS.
* ``tall``: the dense forward's verify step of 24 rows with every layer shape in the tall table (``tall_config``
  answering the heuristic's config), and how many of the layers' products past 16 rows the skinny GEMM ran.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections import Counter
from unittest import mock

import cuda_forward_cases
import hybrid_fast_cases
import torch
import torch.nn.functional as F

from specgen.models import cuda_forward
from specgen.models import skinny_gemm as sg
from specgen.models.block_draft import BlockDraft, BlockDraftConfig
from specgen.models.mtp_head import MTPHead
from specgen.models.paged_kv import BlockAllocator, make_block_table, verify_metadata
from specgen.models.qwen3 import Qwen3Model
from specgen.runtime.vocab_pass import logit_tiles_of

CALLS: Counter = Counter()  # skinny_gemm's products by N ("tall": the products past 16 rows)
_gemm = sg.skinny_gemm


def _counted(x, w, *args, **kwargs):
    CALLS[w.shape[0]] += 1
    CALLS["tall"] += x.shape[0] > sg.MAX_ROWS
    return _gemm(x, w, *args, **kwargs)


def tall_case(dev, dtype) -> dict:
    """The dense forward's verify step of 6 sequences at W = 4 (24 rows, a 32-row tile), every layer shape taking
    the skinny GEMM (``tall_config`` answers the heuristic's config for each and records what it was asked)."""
    asked = set()

    def tall_config(n, k, partial):
        asked.add((n, k, partial))
        return sg.heuristic(n, k, partial)

    CALLS.clear()
    head_off = {"SPECGEN_SKINNY_LM_HEAD": "0"}
    with mock.patch.object(sg, "tall_config", tall_config), mock.patch.dict(os.environ, head_off):
        res = cuda_forward_cases.forward_cases(dev, dtype, 9, flags=("1",), batch=6)["1"]
    return res | {"tall_calls": CALLS["tall"], "asked": sorted(asked)}


def gemm_case(dev, dtype) -> dict:
    big = dev != "cpu"
    n, k, rows = (151936, 1024, (1, 4, 8, 32, 128)) if big else (200, 300, (1, 16, 17, 32, 100, 128))
    g = torch.Generator().manual_seed(3)
    w = (torch.randn(n, k, generator=g) / k**0.5).to(dev, dtype)
    res = {}
    for m in rows:
        x = torch.randn(m, k, generator=g).to(dev, dtype)
        want = x.float() @ w.float().T
        got = sg.skinny_gemm(x, w)
        res[m] = {
            "err": (got.float() - want).abs().max().item(),
            "err_cublas": (F.linear(x, w).float() - want).abs().max().item(),
            "scale": want.abs().max().item(),
            "shape": list(got.shape),
        }
    res["too_many"] = _error_of(
        lambda: sg.skinny_gemm(torch.zeros(sg.MAX_HEAD_ROWS + 1, k, device=dev, dtype=dtype), w)
    )
    return res


def _error_of(call) -> str:
    """What ``call()`` raised as a ValueError, or "no error"."""
    try:
        call()
    except ValueError as e:
        return str(e)
    return "no error"


def out_case(dev, dtype) -> dict:
    """``lm_head(..., out=)`` into a float32 buffer (a vocabulary pass's): the skinny GEMM up to 16 rows, past them
    cuBLAS with float32 output (CUDA) or the product copied in (CPU); each against ``x.float() @ w.float().T``, and
    the rounded head's error beside it.  ``bad``: the errors of an out of the wrong shape."""
    n, k, rows = (151936, 1024, (1, 16, 32, 128)) if dev != "cpu" else (200, 300, (1, 16, 17, 128))
    g = torch.Generator().manual_seed(4)
    w = (torch.randn(n, k, generator=g) / k**0.5).to(dev, dtype)
    res = {}
    with mock.patch.dict(os.environ, {"SPECGEN_SKINNY_LM_HEAD": "16"}):
        for m in rows:
            x = torch.randn(m, k, generator=g).to(dev, dtype)
            want = x.float() @ w.float().T
            out = torch.full((m + 1, n), float("nan"), device=dev)
            got = cuda_forward.lm_head(x, w, True, out[:m])
            rounded = cuda_forward.lm_head(x, w, True)
            res[m] = {
                "same_storage": got.data_ptr() == out.data_ptr() and got.dtype == torch.float32,
                "err": (out[:m] - want).abs().max().item(),
                "err_rounded": (rounded.float() - want).abs().max().item(),
                "scale": want.abs().max().item(),
                "row_after_untouched": bool(out[m].isnan().all()),
            }
        res["bad"] = {
            "lm_head": _error_of(lambda: cuda_forward.lm_head(x, w, True, torch.empty(m, n - 1, device=dev))),
            "skinny": _error_of(lambda: sg.skinny_gemm(x[:1], w, out=torch.empty(2, n, device=dev))),
            "partial": _error_of(lambda: sg.skinny_gemm(x[:1], w, partial=True, out=torch.empty(1, n, device=dev))),
        }
    return res


def tiles_case(dev, dtype) -> dict:
    """``lm_head(..., out=, tiles=)``: on the skinny GEMM (up to ``MAX_HEAD_ROWS`` rows by default where tiles are
    asked for) the tiles equal ``logit_tiles_of`` the float32 logits it wrote, NaN logits among them (a weight row
    of infinities meets h's mixed signs; the last row's h holds a NaN); the torch forward's head and a head past
    ``SPECGEN_SKINNY_LM_HEAD`` (cuBLAS) mark their rows unset; tiles of the wrong shape are an error."""
    n, k, rows = (151936, 1024, (1, 8, 32, 128)) if dev != "cpu" else (200, 300, (1, 17, 128))
    nt = -(-n // 64)
    g = torch.Generator().manual_seed(6)
    w = torch.randn(n, k, generator=g) / k**0.5
    w[5] = float("inf")
    w = w.to(dev, dtype)
    res = {}
    for m in rows:
        x = torch.randn(m, k, generator=g)
        x[-1, 0] = float("nan") if m > 1 else x[-1, 0]
        x = x.to(dev, dtype)
        out, tiles = torch.empty(m, n, device=dev), torch.full((m, nt), 7, dtype=torch.int64, device=dev)
        cuda_forward.lm_head(x, w, True, out, tiles)
        slow = torch.full((m, nt), 7, dtype=torch.int64, device=dev)
        cuda_forward.lm_head(x, w, False, torch.empty(m, n, device=dev), slow)
        res[m] = {
            "equal": torch.equal(tiles, logit_tiles_of(out)),
            "nan": int(out.isnan().sum()),
            "torch_unset": bool((slow[:, 0] == -1).all()),
        }
    with mock.patch.dict(os.environ, {"SPECGEN_SKINNY_LM_HEAD": "16"}):
        past = torch.full((17, nt), 7, dtype=torch.int64, device=dev)
        x = torch.randn(17, k, generator=g).to(dev, dtype)
        cuda_forward.lm_head(x, w, True, torch.empty(17, n, device=dev), past)
        res["past_limit_unset"] = bool((past[:, 0] == -1).all())
    res["bad"] = {
        "lm_head": _error_of(lambda: cuda_forward.lm_head(x, w, True, None, torch.empty(16, nt, dtype=torch.int64))),
        "skinny": _error_of(lambda: sg.skinny_gemm(x[:1], w, tiles=torch.empty(1, nt + 1, dtype=torch.int64))),
        "partial": _error_of(
            lambda: sg.skinny_gemm(x[:1], w, partial=True, tiles=torch.empty(1, nt, dtype=torch.int64))
        ),
    }
    return res


def mtp_case(dev, dtype) -> dict:
    """The dense MTP head's verify-width step (2 sequences of 3 rows), torch against Triton."""
    target = Qwen3Model.create("tiny", seed=0, dtype=dtype, device=dev)
    head = MTPHead.create(target, seed=1)
    g = torch.Generator().manual_seed(5)
    bt = make_block_table(BlockAllocator(8, seed=0), 2, 2, dev)
    pos, slots, kvl, qsl = verify_metadata(torch.zeros(2, dtype=torch.int32, device=dev), bt, 3, 16)
    toks = torch.randint(0, target.config.vocab_size, (6,), generator=g).to(dev)
    hid = torch.randn(6, target.config.hidden_size, generator=g).to(dev, dtype)
    out = {}
    for kind in ("torch", "triton"):
        target.forward_kernels = kind
        head.allocate_kv_cache(8, 16)
        out[kind] = head(toks, pos, slots, hid, bt, kvl, qsl, 3)[1]
    return {"err_logits": (out["torch"] - out["triton"]).abs().max().item(), "scale": out["torch"].abs().max().item()}


def block_case(dev, dtype) -> dict:
    """A DFlash block (2 sequences of 4 rows): its torch layers, then the LM head the target's kernels choose."""
    target = Qwen3Model.create("tiny", seed=0, dtype=dtype, device=dev)
    cfg = BlockDraftConfig.default("dflash", target.config.num_layers, target.config.vocab_size)
    draft = BlockDraft.create(target, cfg, seed=1)
    g = torch.Generator().manual_seed(6)
    bt = make_block_table(BlockAllocator(8, seed=0), 2, 2, dev)
    toks = torch.randint(0, target.config.vocab_size, (8,), generator=g).to(dev)
    ctx = torch.tensor([5, 9], device=dev)
    pos = (ctx[:, None] + torch.arange(4, device=dev)).reshape(-1)
    out = {}
    for kind in ("torch", "triton"):
        target.forward_kernels = kind
        draft.allocate_kv_cache(8, 16)
        out[kind] = draft(toks, pos, bt, ctx, 4)
    return {"err_logits": (out["torch"] - out["triton"]).abs().max().item(), "scale": out["torch"].abs().max().item()}


def graph_case(dtype) -> dict:
    """Node kinds of a captured graph of ``lm_head`` over 8 rows of Qwen3-0.6B's head, skinny and cuBLAS."""
    from specgen.bench.graph_dot import read_dot, summary

    w = torch.randn(151936, 1024, device="cuda", dtype=dtype) / 32
    h = torch.randn(8, 1024, device="cuda", dtype=dtype)
    kinds = {}
    for limit in ("128", "0"):
        os.environ["SPECGEN_SKINNY_LM_HEAD"] = limit
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # compiled and warm before the capture
            cuda_forward.lm_head(h, w)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph(keep_graph=True)
        graph.enable_debug_mode()
        with torch.cuda.graph(graph):
            cuda_forward.lm_head(h, w)
        with tempfile.TemporaryDirectory() as d:
            graph.debug_dump(f"{d}/g.dot")
            with open(f"{d}/g.dot") as f:
                kinds["cublas" if limit == "0" else "skinny"] = summary(read_dot(f.read()))["kinds"]
    return kinds


def main(dev: str, dtype_name: str) -> dict:
    dtype = getattr(torch, dtype_name)
    sg.skinny_gemm = _counted
    os.environ["SPECGEN_SKINNY_LM_HEAD"] = "128"
    cases = {"gemm": gemm_case(dev, dtype), "out": out_case(dev, dtype), "tiles": tiles_case(dev, dtype)}
    CALLS.clear()
    cases["dense"] = cuda_forward_cases.forward_cases(dev, dtype, 9, flags=("1",))["1"]
    cases["dense"]["head_calls"] = CALLS[512]  # the tiny presets' vocabulary: no other product is 512 wide
    for name, case in (("mtp", mtp_case), ("block", block_case)):
        CALLS.clear()
        cases[name] = case(dev, dtype) | {"head_calls": CALLS[512]}
    CALLS.clear()
    cases["hybrid"] = hybrid_fast_cases.main(dev, dtype) | {"head_calls": CALLS[512]}
    cases["tall"] = tall_case(dev, dtype)
    if dev != "cpu":
        cases["graph"] = graph_case(dtype)
    return cases


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
