"""Triton kernels of the fast decoder forward (CUDA; the CPU keeps the exact torch path).

Four kernels replace the chains of small torch ops around the GEMMs of a layer:

* ``qk_norm_rope_store``: per-head RMS norm of q and k, rotate-half RoPE from
  the row's position, k and v stored at the row's slot (``-1``: no write);
* ``paged_attention`` (``triton_attention.py``): causal GQA over the paged
  KV cache;
* ``add_rms_norm``: the residual add and the next RMS norm in one pass;
* ``silu_mul``: ``silu(gate) * up`` over the fused gate-up projection.

Every load is masked: a block entry below 0, a position at or past
``BT * BS`` or past the sequence's length is never read.  Kernels compile on
first use (Triton's JIT, cached on disk) during warm-up, before any capture.
This module is imported only where Triton is; ``TRITON_INTERPRET=1`` runs it
on the CPU, which is how the tests compare it with the torch path.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .triton_attention import attention_tiles, num_splits, paged_attention, pow2

__all__ = ["add_rms_norm", "attention_tiles", "num_splits", "paged_attention", "qk_norm_rope_store", "silu_mul"]


@triton.jit
def _rms_rope(x1, x2, w1, w2, cos, sin, eps, D: tl.constexpr, OUT: tl.constexpr):
    """RMS-normalise rows ``[x1 | x2]`` (the two halves of ``D``), round like torch does, rotate."""
    var = (tl.sum(x1 * x1, 1) + tl.sum(x2 * x2, 1)) / D
    r = 1.0 / tl.sqrt(var + eps)
    n1 = (x1 * r[:, None] * w1[None, :]).to(OUT).to(tl.float32)
    n2 = (x2 * r[:, None] * w2[None, :]).to(OUT).to(tl.float32)
    return n1 * cos[None, :] - n2 * sin[None, :], n2 * cos[None, :] + n1 * sin[None, :]


@triton.jit
def _qk_norm_rope_store_kernel(
    qkv,
    q_out,
    k_cache,
    v_cache,
    q_w,
    k_w,
    positions,
    slots,
    inv_freq,
    eps,
    num_slots,
    H: tl.constexpr,
    KVH: tl.constexpr,
    D: tl.constexpr,
):
    """One program per (row, head): heads ``0..H-1`` are q, ``H..H+KVH-1`` are k (and v stored beside)."""
    n = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1)
    HALF: tl.constexpr = D // 2
    i = tl.arange(0, HALF)
    # the angle rounds to float32 as the torch tables do; its cosine and sine are taken in float64
    angle = (tl.load(positions + n).to(tl.float32) * tl.load(inv_freq + i)).to(tl.float64)
    cos, sin = tl.cos(angle).to(tl.float32), tl.sin(angle).to(tl.float32)
    OUT = q_out.dtype.element_ty
    src = qkv + n * ((H + 2 * KVH) * D) + j * D + tl.arange(0, 1)[:, None] * D + i[None, :]  # [1, HALF]
    x1 = tl.load(src).to(tl.float32)
    x2 = tl.load(src + HALF).to(tl.float32)
    if j < H:
        o1, o2 = _rms_rope(
            x1, x2, tl.load(q_w + i).to(tl.float32), tl.load(q_w + HALF + i).to(tl.float32), cos, sin, eps, D, OUT
        )
        dst = q_out + n * (H * D) + j * D + tl.arange(0, 1)[:, None] * D + i[None, :]
        tl.store(dst, o1.to(OUT))
        tl.store(dst + HALF, o2.to(OUT))
    else:
        s = tl.load(slots + n).to(tl.int64)
        ok = (s >= 0) & (s < num_slots)  # -1 or past the cache: nothing is written
        c1, c2 = _rms_rope(
            x1, x2, tl.load(k_w + i).to(tl.float32), tl.load(k_w + HALF + i).to(tl.float32), cos, sin, eps, D, OUT
        )
        KT = k_cache.dtype.element_ty
        off = s * (KVH * D) + (j - H) * D + tl.arange(0, 1)[:, None] * D + i[None, :]
        tl.store(k_cache + off, c1.to(OUT).to(KT), mask=ok)
        tl.store(k_cache + off + HALF, c2.to(OUT).to(KT), mask=ok)
        v = src + KVH * D
        tl.store(v_cache + off, tl.load(v).to(KT), mask=ok)
        tl.store(v_cache + off + HALF, tl.load(v + HALF).to(KT), mask=ok)


@triton.jit(do_not_specialize=["N"])  # the row count: a new one never compiles a new kernel
def _add_rms_norm_kernel(
    x,
    y,
    res_out,
    norm_out,
    w,
    eps,
    N,
    HID: tl.constexpr,
    BLOCK: tl.constexpr,
    HAS_Y: tl.constexpr,
    Y_SPLITS: tl.constexpr,
):
    """``y``: ``[N, HID]``, or with ``Y_SPLITS > 0`` float32 split-K partial sums ``[Y_SPLITS, N, HID]``."""
    n = tl.program_id(0).to(tl.int64)
    i = tl.arange(0, BLOCK)
    ok = i < HID
    v = tl.load(x + n * HID + i, mask=ok, other=0.0)
    if HAS_Y:
        if Y_SPLITS > 0:
            yv = tl.zeros([BLOCK], tl.float32)
            for sp in tl.static_range(Y_SPLITS):
                yv += tl.load(y + (sp * N + n) * HID + i, mask=ok, other=0.0)
        else:
            yv = tl.load(y + n * HID + i, mask=ok, other=0.0).to(tl.float32)
        v = (v.to(tl.float32) + yv).to(v.dtype)
        tl.store(res_out + n * HID + i, v, mask=ok)
    vf = v.to(tl.float32)
    r = 1.0 / tl.sqrt(tl.sum(vf * vf, 0) / HID + eps)
    o = vf * r * tl.load(w + i, mask=ok, other=0.0).to(tl.float32)
    tl.store(norm_out + n * HID + i, o.to(norm_out.dtype.element_ty), mask=ok)


@triton.jit
def _silu_mul_kernel(gate_up, out, I: tl.constexpr, BLOCK: tl.constexpr):
    n = tl.program_id(0).to(tl.int64)
    i = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = i < I
    gt = tl.load(gate_up + n * (2 * I) + i, mask=ok, other=0.0).to(tl.float32)
    up = tl.load(gate_up + n * (2 * I) + I + i, mask=ok, other=0.0).to(tl.float32)
    act = (gt / (1.0 + tl.exp(-gt))).to(out.dtype.element_ty).to(tl.float32)
    tl.store(out + n * I + i, (act * up).to(out.dtype.element_ty), mask=ok)


def qk_norm_rope_store(
    qkv: torch.Tensor,
    q_w: torch.Tensor,
    k_w: torch.Tensor,
    positions: torch.Tensor,
    slots: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
    eps: float,
    inv_freq: torch.Tensor,
) -> torch.Tensor:
    """``qkv [N, (H + 2 KVH) D]`` -> rotated ``q [N, H, D]``; k, v land in ``k_cache/v_cache [S+1, KVH, D]``.

    ``inv_freq [D / 2]`` float32: the RoPE frequencies (``rope_inv_freq``).
    """
    n, d = qkv.shape[0], q_w.shape[0]
    q = torch.empty(n, num_heads, d, dtype=qkv.dtype, device=qkv.device)
    if n:
        _qk_norm_rope_store_kernel[(n, num_heads + num_kv_heads)](
            qkv,
            q,
            k_cache,
            v_cache,
            q_w,
            k_w,
            positions,
            slots,
            inv_freq,
            eps,
            k_cache.shape[0] - 1,
            H=num_heads,
            KVH=num_kv_heads,
            D=d,
            num_warps=1,
        )
    return q


def add_rms_norm(
    x: torch.Tensor, y: torch.Tensor | None, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x + y, rms_norm(x + y))``; without ``y``: ``(x, rms_norm(x))``.

    ``y`` may be float32 split-K partials ``[splits, N, hidden]`` (``skinny_gemm``), summed here.
    """
    n, hid = x.shape
    res = torch.empty_like(x) if y is not None else x
    normed = torch.empty_like(x)
    if n:
        _add_rms_norm_kernel[(n,)](
            x,
            y if y is not None else x,
            res,
            normed,
            weight,
            eps,
            n,
            HID=hid,
            BLOCK=pow2(hid),
            HAS_Y=y is not None,
            Y_SPLITS=y.shape[0] if y is not None and y.dim() == 3 else 0,
            num_warps=8 if hid >= 2048 else 4,
        )
    return res, normed


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """``silu(gate_up[:, :I]) * gate_up[:, I:]``."""
    n, two_i = gate_up.shape
    i = two_i // 2
    out = torch.empty(n, i, dtype=gate_up.dtype, device=gate_up.device)
    block = 1024
    if n:
        _silu_mul_kernel[(n, triton.cdiv(i, block))](gate_up, out, I=i, BLOCK=block)
    return out
