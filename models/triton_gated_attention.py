"""Triton kernels around the hybrid target's gated full attention (CUDA; the CPU keeps the torch path).

* ``gated_qk_norm_rope_store``: from the fused q / gate / k / v projection,
  the per-head zero-centred RMS norm of q and k, rotate-half RoPE on the
  first ``rotary_dim`` dims from the row's position, q written contiguous and
  k, v stored at the row's slot (``-1`` or past the cache: no write). One
  launch where the torch path chains about twenty.
* ``sigmoid_gate_mul``: the attention output times ``sigmoid(gate)``, the
  gate read in place from the projection.

The arithmetic follows the torch path's roundings: the norm in float32
rounded to the activation dtype, the rotation in float32 rounded once; the
gate's sigmoid rounded before the product.  ``TRITON_INTERPRET=1`` runs them
on the CPU, which is how the tests compare them with the torch path.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["gated_qk_norm_rope_store", "sigmoid_gate_mul"]


@triton.jit
def _norm_rope(src, gain, cos, sin, d, partner, lead, rotary, eps, D: tl.constexpr, OUT: tl.constexpr):
    """RMS-normalise the head vector at ``src`` (gain in float32), round, rotate its first dims."""
    x = tl.load(src + d).to(tl.float32)
    xp = tl.load(src + partner).to(tl.float32)
    r = 1.0 / tl.sqrt(tl.sum(x * x, 0) / D + eps)
    n = (x * r * tl.load(gain + d)).to(OUT).to(tl.float32)
    npart = (xp * r * tl.load(gain + partner)).to(OUT).to(tl.float32)
    rot = tl.where(lead, -npart, npart)
    return tl.where(rotary, n * cos + rot * sin, n)


@triton.jit
def _gated_qk_norm_rope_store_kernel(
    proj,
    q_out,
    k_cache,
    v_cache,
    q_gain,
    k_gain,
    positions,
    slots,
    inv_freq,
    eps,
    num_slots,
    H: tl.constexpr,
    KVH: tl.constexpr,
    D: tl.constexpr,
    ROT: tl.constexpr,
):
    """One program per (row, head): heads ``0..H-1`` are q, ``H..H+KVH-1`` are k (and v stored beside)."""
    n = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1)
    HALF: tl.constexpr = ROT // 2
    d = tl.arange(0, D)
    rotary = d < ROT
    lead = d < HALF
    partner = tl.where(rotary, tl.where(lead, d + HALF, d - HALF), d)
    # the angle rounds to float32 as the torch tables do; its cosine and sine are taken in float64
    freq = tl.load(inv_freq + (d % HALF), mask=rotary, other=0.0)
    angle = (tl.load(positions + n).to(tl.float32) * freq).to(tl.float64)
    cos, sin = tl.cos(angle).to(tl.float32), tl.sin(angle).to(tl.float32)
    OUT = q_out.dtype.element_ty
    row = proj + n * (2 * H * D + 2 * KVH * D)
    if j < H:
        o = _norm_rope(row + j * (2 * D), q_gain, cos, sin, d, partner, lead, rotary, eps, D, OUT)
        tl.store(q_out + (n * H + j) * D + d, o.to(OUT))
    else:
        s = tl.load(slots + n).to(tl.int64)
        ok = (s >= 0) & (s < num_slots)  # -1 or past the cache: nothing is written
        src = row + 2 * H * D + (j - H) * D
        c = _norm_rope(src, k_gain, cos, sin, d, partner, lead, rotary, eps, D, OUT)
        KT = k_cache.dtype.element_ty
        off = (s * KVH + (j - H)) * D + d
        tl.store(k_cache + off, c.to(OUT).to(KT), mask=ok & (d < D))
        tl.store(v_cache + off, tl.load(src + KVH * D + d).to(KT), mask=ok & (d < D))


@triton.jit
def _sigmoid_gate_mul_kernel(o, proj, out, H: tl.constexpr, KVH: tl.constexpr, D: tl.constexpr):
    n = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    d = tl.arange(0, D)
    OUT = out.dtype.element_ty
    g = tl.load(proj + n * (2 * H * D + 2 * KVH * D) + h * (2 * D) + D + d).to(tl.float32)
    s = (1.0 / (1.0 + tl.exp(-g))).to(OUT).to(tl.float32)
    v = tl.load(o + (n * H + h) * D + d).to(tl.float32)
    tl.store(out + (n * H + h) * D + d, (v * s).to(OUT))


def _check(proj: torch.Tensor, num_heads: int, num_kv_heads: int, head_dim: int) -> None:
    width = 2 * (num_heads + num_kv_heads) * head_dim
    if proj.dim() != 2 or proj.shape[1] != width or not proj.is_contiguous():
        raise ValueError(f"the fused projection must be contiguous [N, {width}], not {tuple(proj.shape)}")


def gated_qk_norm_rope_store(
    proj: torch.Tensor,
    q_gain: torch.Tensor,
    k_gain: torch.Tensor,
    positions: torch.Tensor,
    slots: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
    eps: float,
    inv_freq: torch.Tensor,
) -> torch.Tensor:
    """``proj [N, H * 2D + 2 * KVH * D]`` (per head ``[query | gate]``, then k, then v) -> normed, rotated
    ``q [N, H, D]``; k and v land at the rows' slots of ``k_cache / v_cache [S+1, KVH, D]``.

    ``q_gain, k_gain [D]`` float32 are the norms' gains (``1 + weight``); ``inv_freq [rotary_dim / 2]``
    float32 the RoPE frequencies of the rotated leading dims.
    """
    d = q_gain.shape[0]
    _check(proj, num_heads, num_kv_heads, d)
    rot = 2 * inv_freq.shape[0]
    if rot > d or rot % 2 or d & (d - 1):
        raise ValueError(f"rotary dims {rot} must be even and at most the head dim {d} (a power of two)")
    n = proj.shape[0]
    q = torch.empty(n, num_heads, d, dtype=proj.dtype, device=proj.device)
    if n:
        _gated_qk_norm_rope_store_kernel[(n, num_heads + num_kv_heads)](
            proj,
            q,
            k_cache,
            v_cache,
            q_gain,
            k_gain,
            positions,
            slots,
            inv_freq,
            eps,
            k_cache.shape[0] - 1,
            H=num_heads,
            KVH=num_kv_heads,
            D=d,
            ROT=rot,
            num_warps=2,
        )
    return q


def sigmoid_gate_mul(o: torch.Tensor, proj: torch.Tensor, num_kv_heads: int) -> torch.Tensor:
    """``o [N, H, D] * sigmoid(gate)`` with the gate read from ``proj`` (as ``gated_qk_norm_rope_store``'s);
    returns ``[N, H * D]``."""
    n, h, d = o.shape
    _check(proj, h, num_kv_heads, d)
    out = torch.empty(n, h * d, dtype=o.dtype, device=o.device)
    if n:
        _sigmoid_gate_mul_kernel[(n, h)](o.contiguous(), proj, out, H=h, KVH=num_kv_heads, D=d, num_warps=2)
    return out
