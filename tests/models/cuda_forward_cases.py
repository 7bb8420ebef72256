"""The fast forward's Triton kernels against torch references, case by case.

Run as a script (``python cuda_forward_cases.py DEVICE DTYPE``) so that the CPU
run can set ``TRITON_INTERPRET=1`` before Triton is imported; prints one JSON
object: each case's largest absolute error and what else it checked.
"""

from __future__ import annotations

import json
import os
import sys
from unittest import mock

import torch

from specgen.models import triton_kernels as fk
from specgen.models.paged_kv import BlockAllocator, make_block_table, verify_metadata
from specgen.models.qwen3 import ModelConfig, Qwen3Model
from specgen.models.triton_attention import Tiling


def reference_attention(q, kc, vc, bt, kv_lens, positions, qsl, rows, bs):
    """Plain per-row softmax attention over the keys the contract makes visible."""
    n, h, d = q.shape
    kvh = kc.shape[1]
    out = torch.zeros(n, h, d, dtype=torch.float32, device=q.device)
    for b in range(bt.shape[0]):
        for r in range(rows):
            row = int(qsl[b]) + r
            qp = int(positions[row])
            ps = torch.arange(min(int(kv_lens[b]), qp + 1, bt.shape[1] * bs), device=q.device)
            entry = bt[b, ps // bs].long() if len(ps) else ps
            ok = entry >= 0
            slot = (entry * bs + ps % bs)[ok]
            if len(slot) == 0:
                continue
            k, v = kc[slot].float(), vc[slot].float()  # [L, KVH, D]
            for hh in range(h):
                s = (k[:, hh // (h // kvh)] @ q[row, hh].float()) * d**-0.5
                out[row, hh] = torch.softmax(s, 0) @ v[:, hh // (h // kvh)]
    return out


def attention_case(dev, dtype, b, h, kvh, d, rows, bt_w, bs, seed, holes=False, over=False, tiling=None):
    g = torch.Generator().manual_seed(seed)
    blocks = b * bt_w + 3
    kc = torch.randn(blocks * bs + 1, kvh, d, generator=g).to(dev, dtype)
    vc = torch.randn(blocks * bs + 1, kvh, d, generator=g).to(dev, dtype)
    bt = torch.randperm(blocks, generator=g)[: b * bt_w].view(b, bt_w).int()
    if holes:
        bt[torch.rand(bt.shape, generator=g) < 0.3] = -1
    cap = bt_w * bs
    seq = torch.randint(0, cap - rows + 1, (b,), generator=g)
    seq[0] = cap - rows  # the last positions of the table
    if b > 1:
        seq[1] = 0  # no context at all
    kv_lens = (seq + rows + (cap if over else 0)).int()  # over: lengths past the table's capacity
    positions = (seq[:, None] + torch.arange(rows)).reshape(-1).int()
    qsl = (torch.arange(b + 1) * rows).int()
    q = torch.randn(b * rows, h, d, generator=g).to(dev, dtype)
    args = [t.to(dev) for t in (bt, kv_lens, positions, qsl)]
    got = fk.paged_attention(q, kc, vc, *args, rows, bs, tiling=tiling)
    want = reference_attention(q, kc, vc, *args, rows, bs)
    _, tiles = fk.attention_tiles(rows, h // kvh)
    return {
        "err": (got.float() - want).abs().max().item(),
        "tiles": tiles,
        "splits": fk.num_splits(b * kvh * tiles, cap),
        "finite": bool(torch.isfinite(got).all()),
    }


def norm_rope_case(dev, dtype, n, h, kvh, d, seed):
    """q/k norm + RoPE + store against the torch path's ops; -1 and past-the-end slots write nothing."""
    from specgen.models.paged_kv import AttentionBatch
    from specgen.models.qwen3 import RMSNorm, apply_rope

    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(n, (h + 2 * kvh) * d, generator=g).to(dev, dtype)
    qn, kn = RMSNorm(d, 1e-6).to(dev, dtype), RMSNorm(d, 1e-6).to(dev, dtype)
    with torch.no_grad():
        qn.weight.copy_(torch.rand(d, generator=g) + 0.5)
        kn.weight.copy_(torch.rand(d, generator=g) + 0.5)
    slots_n = 4 * n
    pos = torch.randint(0, 40000, (n,), generator=g).int().to(dev)
    slots = torch.randperm(slots_n, generator=g)[:n].int()
    slots[0], slots[-1] = -1, slots_n + 7  # no write, and a slot past the cache
    slots = slots.to(dev)
    kc = torch.zeros(slots_n + 1, kvh, d, dtype=dtype, device=dev)
    vc = torch.zeros_like(kc)
    with torch.no_grad():
        inv_freq = 1.0 / (1e6 ** (torch.arange(0, d, 2, device=dev, dtype=torch.float32) / d))
        q = fk.qk_norm_rope_store(qkv, qn.weight, kn.weight, pos, slots, kc, vc, h, kvh, 1e-6, inv_freq)
        ab = AttentionBatch.build(
            pos,
            slots,
            torch.zeros(1, 1, dtype=torch.int32, device=dev),
            pos,
            torch.tensor([0, n], device=dev),
            n,
            d,
            1e6,
        )
        qs, ks, vs = qkv.view(n, h + 2 * kvh, d).split([h, kvh, kvh], dim=1)
        qk = apply_rope(torch.cat([qn(qs), kn(ks)], 1), ab.cos, ab.sin)
    ok = (slots >= 0) & (slots < slots_n)
    written = torch.zeros(slots_n + 1, dtype=torch.bool, device=dev)
    written[slots[ok].long()] = True
    return {
        "err_q": (q.float() - qk[:, :h].float()).abs().max().item(),
        "err_k": (kc[slots[ok].long()].float() - qk[ok, h:].float()).abs().max().item(),
        "err_v": (vc[slots[ok].long()].float() - vs[ok].float()).abs().max().item(),
        "untouched": bool((kc[~written] == 0).all() and (vc[~written] == 0).all()),
    }


def elementwise_case(dev, dtype, n, hid, inter, seed):
    g = torch.Generator().manual_seed(seed)
    x, y = (torch.randn(n, hid, generator=g).to(dev, dtype) for _ in range(2))
    w = (torch.rand(hid, generator=g) + 0.5).to(dev, dtype)
    res, normed = fk.add_rms_norm(x, y, w, 1e-6)
    want_res = x + y
    want = torch.nn.functional.rms_norm(want_res, (hid,), w, 1e-6)
    gu = torch.randn(n, 2 * inter, generator=g).to(dev, dtype)
    act = fk.silu_mul(gu)
    want_act = torch.nn.functional.silu(gu[:, :inter]) * gu[:, inter:]
    return {
        "err_res": (res.float() - want_res.float()).abs().max().item(),
        "err_norm": (normed.float() - want.float()).abs().max().item(),
        "err_silu": (act.float() - want_act.float()).abs().max().item(),
    }


def skinny_case(dev, dtype, seed):
    """The skinny GEMM against ``x @ w.T``: direct and as split-K partials, K not a multiple of the tile, by
    the default config and by narrow and wide tiles with more splits than the K steps fill."""
    from specgen.models.skinny_gemm import Config, skinny_gemm, splits_for

    configs = (None, Config(16, 256, 8, 4, 2), Config(32, 128, 2, 4, 3))

    g = torch.Generator().manual_seed(seed)
    worst, splits = 0.0, []
    for m, n, k in ((1, 96, 200), (4, 1024, 3072), (16, 130, 1024), (3, 64, 2048)):
        x = torch.randn(m, k, generator=g).to(dev, dtype)
        w = (torch.randn(n, k, generator=g) / k**0.5).to(dev, dtype)
        want = x.float() @ w.float().T
        # the explicit tiles on the small shapes only (the interpreter's time grows with N x K)
        tiles = configs if n * k <= 2**17 else configs[:1]
        for partial, config in ((p, c) for p in (False, True) for c in tiles):
            got = skinny_gemm(x, w, partial=partial, config=config)
            got = got.sum(0) if got.dim() == 3 else got
            worst = max(worst, (got.float() - want).abs().max().item())
        splits.append(splits_for(n, k))
    return {"err": worst, "splits": splits}


def forward_cases(dev, dtype, seed, flags=("0", "1"), batch=3):
    """The whole model, torch forward against Triton forward: a prefill, then a verify step of ``batch`` sequences
    (at most 8) of 4 rows, once per ``SPECGEN_SKINNY_GEMM`` flag (0: cuBLAS; 1: every projection of at most 16 rows
    skinny, and past 16 those ``skinny_gemm.tall_config`` names).

    The prefill's ``batch * 60`` rows never take the skinny GEMM, so it is the same under every flag: it runs once per
    kind, and each flag's verify step starts from a copy of the cache it left."""
    import copy

    from specgen.models import cuda_forward

    cfg = ModelConfig("t", 2, 64, 4, 2, 16, 128, 512)
    m = Qwen3Model.create(cfg, seed=seed, dtype=dtype, device=dev)
    b, bt_w, bs, w = batch, 6, 16, 4
    bt = make_block_table(BlockAllocator(64, seed=seed), b, bt_w, dev)
    seq = torch.tensor([20, 7, 60, 33, 1, 45, 12, 59][:b], dtype=torch.int32, device=dev)
    g = torch.Generator().manual_seed(seed)
    pre = torch.randint(0, cfg.vocab_size, (b * 60,), generator=g).to(dev)
    toks = torch.randint(0, cfg.vocab_size, (b * w,), generator=g).to(dev)
    with mock.patch.dict(os.environ, {"SPECGEN_SKINNY_GEMM": "1"}):  # the prefill is too tall for it anyway
        assert not cuda_forward._use_skinny(torch.empty(b * 60, 1), torch.empty(8, 1))
    outs = {flag: {} for flag in flags}
    for kind in ("torch", "triton"):
        m.forward_kernels = kind
        m.allocate_kv_cache(64, bs, bt_w)
        m(
            pre,
            *verify_metadata(torch.zeros_like(seq), bt, 60, bs)[:2],
            bt,
            *verify_metadata(torch.zeros_like(seq), bt, 60, bs)[2:],
            60,
        )
        prefilled = m.kv_cache
        for flag in flags:
            m.kv_cache = copy.deepcopy(prefilled)
            with mock.patch.dict(os.environ, {"SPECGEN_SKINNY_GEMM": flag}):
                pos, slots, kvl, qsl = verify_metadata(seq, bt, w, bs)
                hidden, logits = m(toks, pos, slots, bt, kvl, qsl, w)
            outs[flag][kind] = (hidden, logits, m.kv_cache._k[:, :-1].clone(), m.greedy_tokens(logits))
    results = {}
    for flag in flags:
        (h0, l0, k0, t0), (h1, l1, k1, t1) = outs[flag]["torch"], outs[flag]["triton"]
        results[flag] = {
            "err_hidden": (h0 - h1).abs().max().item(),
            "err_logits": (l0 - l1).abs().max().item(),
            "err_kv": (k0 - k1).float().abs().max().item(),
            "same_tokens": bool((t0 == t1).all()),
        }
    return results


def block_context_case(dev, dtype, seed):
    """A block draft's context K/V (``BlockDraft.write_context``): the torch path against the fast one
    (``cuda_forward.store_kv``) over two draft layers, some rows at slot -1 (nothing written)."""
    from specgen.models.block_draft import BlockDraft, BlockDraftConfig

    cfg = ModelConfig("t", 6, 64, 4, 2, 16, 128, 512)
    target = Qwen3Model.create(cfg, seed=seed, dtype=dtype, device=dev)
    draft = BlockDraft.create(target, BlockDraftConfig.default("dflash", cfg.num_layers, cfg.vocab_size), seed=seed)
    g = torch.Generator().manual_seed(seed)
    n = 11
    taps = torch.randn(n, len(draft.tap_layers) * cfg.hidden_size, generator=g).to(dev, dtype)
    positions = torch.randint(0, 4000, (n,), generator=g).to(dev)
    slots = torch.randperm(40, generator=g)[:n].to(dev)
    slots[torch.tensor([2, 7])] = -1
    caches = {}
    for kind in ("torch", "triton"):
        target.forward_kernels = kind
        draft.allocate_kv_cache(4, 16)
        for i in range(draft.config.num_layers):  # a mark in every slot: a -1 row must leave its slot alone
            draft.kv_cache.layer_storage(i)[0].fill_(7.0)
            draft.kv_cache.layer_storage(i)[1].fill_(7.0)
        draft.write_context(taps, positions, slots)
        caches[kind] = (draft.kv_cache._k[:, :-1].clone(), draft.kv_cache._v[:, :-1].clone())
    # context_kv gives what write_context stored, bit for bit, on the fast path too (the tests' reference
    # store, tests/oracles/block_context.py, is built from it)
    kept = slots >= 0
    same = all(
        torch.equal(k[kept], caches["triton"][0][i, slots[kept]])
        and torch.equal(v[kept], caches["triton"][1][i, slots[kept]])
        for i, (k, v) in enumerate(draft.context_kv(taps, positions))
    )
    # the proposer's staged path: context_rows copied into larger staging buffers beside the forward, the tail's
    # store_context over their first n rows, stores the same bits
    staging = [torch.zeros(n + 5, r.shape[1], dtype=r.dtype, device=r.device) for r in draft.context_rows(taps)]
    for buf, r in zip(staging, draft.context_rows(taps)):
        buf[:n].copy_(r)
    draft.allocate_kv_cache(4, 16)
    for i in range(draft.config.num_layers):
        draft.kv_cache.layer_storage(i)[0].fill_(7.0)
        draft.kv_cache.layer_storage(i)[1].fill_(7.0)
    draft.store_context([b[:n] for b in staging], positions, slots)
    staged = torch.equal(draft.kv_cache._k[:, :-1], caches["triton"][0]) and torch.equal(
        draft.kv_cache._v[:, :-1], caches["triton"][1]
    )
    (k0, v0), (k1, v1) = caches["torch"], caches["triton"]
    unwritten = torch.ones(k0.shape[1], dtype=torch.bool, device=k0.device)
    unwritten[slots[slots >= 0]] = False
    return {
        "err_k": (k0 - k1).float().abs().max().item(),
        "err_v": (v0 - v1).float().abs().max().item(),
        "untouched": bool((k1[:, unwritten] == 7.0).all() and (v1[:, unwritten] == 7.0).all()),
        "written": bool((k1[:, ~unwritten] != 7.0).any()),
        "context_kv_is_stored": same,
        "staged_is_stored": staged,
    }


def main(dev: str, dtype_name: str) -> dict:
    dtype = getattr(torch, dtype_name)
    big = dev != "cpu"
    cases = {
        "attn_b1_w4": attention_case(dev, dtype, 1, 4, 2, 16, 4, 4, 16, 1),
        "attn_split": attention_case(dev, dtype, 2, 4, 2, 16, 4, 20, 16, 2),
        "attn_holes_over": attention_case(dev, dtype, 3, 4, 2, 32, 5, 9, 16, 3, holes=True, over=True),
        "attn_bs5_w16": attention_case(dev, dtype, 2, 4, 2, 16, 16, 7, 5, 4),
        "attn_prefill_tiles": attention_case(dev, dtype, 2, 4, 2, 16, 70, 6, 16, 12, holes=True),
        "attn_w1_g4": attention_case(dev, dtype, 2, 8, 2, 16, 1, 3, 32, 5),
        "attn_largest": attention_case(dev, dtype, 64 if big else 16, 4, 2, 16, 2, 3, 16, 6, holes=True),
        # the launch's other choices: 64-row tiles with IEEE dots (float32's default before tf32x3), 16-key chunks
        "attn_ieee_m64": attention_case(
            dev, dtype, 2, 4, 2, 16, 70, 6, 16, 13, holes=True, tiling=Tiling(block_m=64, precision="ieee")
        ),
        "attn_m16_n16_w8": attention_case(
            dev, dtype, 2, 4, 2, 16, 37, 6, 16, 14, tiling=Tiling(block_m=16, block_n=16, num_warps=8, num_stages=1)
        ),
        "norm_rope": norm_rope_case(dev, dtype, 9, 4, 2, 16, 7),
        "elementwise": elementwise_case(dev, dtype, 5, 96, 80, 8),
        "skinny": skinny_case(dev, dtype, 13),
        "block_context": block_context_case(dev, dtype, 16),
    }
    forward = forward_cases(dev, dtype, 9)  # cuBLAS, then every projection skinny
    cases["forward"], cases["forward_skinny"] = forward["0"], forward["1"]
    if big:  # the production head layout
        cases["attn_qwen3"] = attention_case(dev, dtype, 2, 16, 8, 128, 4, 10, 128, 10, holes=True)
        cases["attn_qwen3_prefill"] = attention_case(dev, dtype, 1, 16, 8, 128, 600, 6, 128, 15)  # ends at the cap
        cases["norm_rope_qwen3"] = norm_rope_case(dev, dtype, 6, 16, 8, 128, 11)
    return cases


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
