"""The delta rule's chunked matrix form in two launches: every chunk's triangular solve at once, then the state pass.

The chunk's triangular solve does not depend on the state, so it stays off
the sequential path (in one launch, the program that carries the state from
chunk to chunk would solve each chunk on the way: 2.4-2.6x slower over a
prefill on an H100, ``benchmarks/results/hybrid/gdn_28495f9_h100/``). With ``T`` the
inverse of ``I + diag(beta) A`` (``triton_gdn_prefill``'s notation), the
values a chunk's rows add are ``U = T diag(beta) V - (T diag(beta e^L) K) h0``,
so:

* ``_wy_prepare_kernel`` (one program per chunk, sequence and value head, all
  at once) writes each chunk's ``T diag(beta) V``, ``T diag(beta e^L) K``,
  ``e^L q``, ``k``, ``L`` and ``M * Q K^T``;
* ``_wy_state_kernel`` (one program per sequence, value head and value tile)
  carries the state over the chunks: ``u = uw - w h``, ``o = (e^L q) h +
  (M * Q K^T) u``, the writing rows' states and the chunk's end state, five
  products per chunk and nothing else.

The semantics, slot rules and arguments are ``triton_gdn.delta_rule_slots``'s.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .triton_gdn_prefill import CHUNK, _chunk_inputs, _solve_chunk, _state_tile, _write_states_and_carry, launch_inputs

__all__ = ["delta_rule_wy"]


@triton.jit
def _wy_prepare_kernel(
    mixed, a_raw, b_raw, a_log, dt_bias, rows,  # as delta_rule_slots's
    uw, ww, qg, kn, cum_buf, aqk,  # [B, RP, HV, DV], [B, RP, HV, DK] x 3, [B, RP, HV], [B, RP // CH, HV, CH, CH]
    N, R, RP, scale, stride_ab,
    HV: tl.constexpr, GROUP: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, BK: tl.constexpr,
    BVF: tl.constexpr, CH: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    c = tl.program_id(0)
    bh = tl.program_id(1)
    b, hv = bh // HV, bh % HV
    hk = hv // GROUP
    C: tl.constexpr = 2 * (HV // GROUP) * DK + HV * DV
    QK: tl.constexpr = (HV // GROUP) * DK
    offs_k = tl.arange(0, BK)
    offs_v = tl.arange(0, BVF)
    mask_k, mask_v = offs_k < DK, offs_v < DV
    rr = tl.arange(0, CH)
    i = c * CH
    decay = -tl.exp(tl.load(a_log + hv).to(tl.float32))
    bias = tl.load(dt_bias + hv).to(tl.float32)
    chunk = (mixed, a_raw, b_raw, rows, b, i, R, N, stride_ab, hk, hv, offs_k, mask_k, offs_v, mask_v, rr, scale)
    _, _, q, k, v, log_g, beta = _chunk_inputs(*chunk, decay, bias, C, QK, DK, DV)
    cum = tl.cumsum(log_g, axis=0)
    m_upto, inv = _solve_chunk(k, beta, cum, rr, CH, PRECISION)
    g_row = tl.exp(cum)
    base = (b * RP + i + rr).to(tl.int64) * HV + hv  # [CH]: the (row, head) of the buffers
    tl.store(uw + base[:, None] * DV + offs_v[None, :], tl.dot(inv, beta[:, None] * v, input_precision=PRECISION),
             mask=mask_v[None, :])  # fmt: skip
    w = tl.dot(inv, (beta * g_row)[:, None] * k, input_precision=PRECISION)
    tl.store(ww + base[:, None] * DK + offs_k[None, :], w, mask=mask_k[None, :])
    tl.store(qg + base[:, None] * DK + offs_k[None, :], g_row[:, None] * q, mask=mask_k[None, :])
    tl.store(kn + base[:, None] * DK + offs_k[None, :], k, mask=mask_k[None, :])
    tl.store(cum_buf + base, cum)
    a_qk = m_upto * tl.dot(q, tl.trans(k), input_precision=PRECISION)
    a_base = ((b * (RP // CH) + c) * HV + hv).to(tl.int64) * CH * CH
    tl.store(aqk + a_base + rr[:, None] * CH + rr[None, :], a_qk)


@triton.jit
def _wy_state_kernel(
    uw, ww, qg, kn, cum_buf, aqk, pool, rows, state_read, state_write, out,
    num_slots, N, R, RP,
    HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    CH: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    bh = tl.program_id(1)
    b, hv = bh // HV, bh % HV
    offs_k, mask_k, offs_v, mask_v, mask_h, tile, head, h = _state_tile(
        pool, state_read, b, hv, num_slots, HV, DK, DV, BK, BV
    )
    rr = tl.arange(0, CH)
    i = 0
    while i < R:
        base = (b * RP + i + rr).to(tl.int64) * HV + hv
        w = tl.load(ww + base[:, None] * DK + offs_k[None, :], mask=mask_k[None, :], other=0.0)
        q = tl.load(qg + base[:, None] * DK + offs_k[None, :], mask=mask_k[None, :], other=0.0)
        k = tl.load(kn + base[:, None] * DK + offs_k[None, :], mask=mask_k[None, :], other=0.0)
        cum = tl.load(cum_buf + base)
        a_base = ((b * (RP // CH) + i // CH) * HV + hv).to(tl.int64) * CH * CH
        a_qk = tl.load(aqk + a_base + rr[:, None] * CH + rr[None, :])
        u = tl.load(uw + base[:, None] * DV + offs_v[None, :], mask=mask_v[None, :], other=0.0)
        u -= tl.dot(w, h, input_precision=PRECISION)
        o = tl.dot(q, h, input_precision=PRECISION) + tl.dot(a_qk, u, input_precision=PRECISION)
        r_ok = i + rr < R
        n = tl.load(rows + b * R + i + rr, mask=r_ok, other=-1)
        n_ok = r_ok & (n >= 0) & (n < N)
        dst = tl.where(n_ok, n, 0).to(tl.int64)
        tl.store(out + (dst[:, None] * HV + hv) * DV + offs_v[None, :], o, mask=n_ok[:, None] & mask_v[None, :])
        where = (pool, rows, state_write, b, i, R, N, num_slots, head, tile, mask_h, rr)
        h = _write_states_and_carry(h, k, u, cum, *where, HV, DK, DV, CH, PRECISION)
        i += CH


def delta_rule_wy(
    mixed: torch.Tensor,
    a_raw: torch.Tensor,
    b_raw: torch.Tensor,
    a_log: torch.Tensor,
    dt_bias: torch.Tensor,
    pool: torch.Tensor,
    rows: torch.Tensor,
    state_read: torch.Tensor,
    state_write: torch.Tensor,
    num_slots: int,
    key_heads: int,
    key_dim: int,
    values_per_program: int = 16,
    num_warps: int = 8,
    precision: str = "ieee",
) -> torch.Tensor:
    """``triton_gdn.delta_rule_slots`` in two launches (the arguments and the result are its own). Options: the
    state pass's value tile (a power of two, at least 16), the warps of both kernels and the products' input
    precision (``"ieee"`` float32 or ``"tf32x3"``). At the defaults neither kernel spills when compiled for sm_90
    (``benchmarks/triton_static.py``: 255 and 206 registers)."""
    b, r, _ = mixed.shape
    n, hv = a_raw.shape
    a_raw, b_raw, bk = launch_inputs(a_raw, b_raw, key_dim, values_per_program, precision)
    dv, dev, f32 = pool.shape[-1], mixed.device, torch.float32
    chunks = max(1, triton.cdiv(r, CHUNK))
    rp = chunks * CHUNK
    uw = torch.empty(b, rp, hv, dv, dtype=f32, device=dev)
    ww, qg, kn = (torch.empty(b, rp, hv, key_dim, dtype=f32, device=dev) for _ in range(3))
    cum = torch.empty(b, rp, hv, dtype=f32, device=dev)
    aqk = torch.empty(b, chunks, hv, CHUNK, CHUNK, dtype=f32, device=dev)
    out = torch.zeros(n, hv, dv, dtype=f32, device=dev)
    mixed, rows = mixed.contiguous(), rows.contiguous()
    shape = dict(HV=hv, DK=key_dim, DV=dv, BK=bk, CH=CHUNK, PRECISION=precision, num_warps=num_warps)
    if r > 0:
        args = (mixed, a_raw, b_raw, a_log, dt_bias, rows, uw, ww, qg, kn, cum, aqk, n, r, rp, key_dim**-0.5)
        bvf = max(16, triton.next_power_of_2(dv))
        _wy_prepare_kernel[(chunks, b * hv)](*args, a_raw.stride(0), GROUP=hv // key_heads, BVF=bvf, **shape)
    args = (uw, ww, qg, kn, cum, aqk, pool, rows, state_read.contiguous(), state_write.contiguous(), out)
    bv = values_per_program
    _wy_state_kernel[(triton.cdiv(dv, bv), b * hv)](*args, num_slots, n, r, rp, BV=bv, **shape)
    return out
