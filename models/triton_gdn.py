"""Triton kernels of the Gated DeltaNet layer on the GPU, reading and writing the linear state by slot.

Three launches replace the torch path's per-row loop (``gated_deltanet``
gives the semantics, which the CPU keeps as the exact reference):

* ``conv_slots``: the depthwise causal conv1d + SiLU over each sequence's
  rows, its window read from ``state_read[b]``'s slot and the window after
  each row ``n`` written to ``state_write[n]``'s slot;
* ``delta_rule_slots``: L2-normalised q / k, ``g = -exp(A_log) *
  softplus(a + dt_bias)``, ``beta = sigmoid(b)`` and the gated delta rule per
  value head, the float32 state read from one slot and the state after each
  row written to that row's slot (the vLLM-style scheme a verification
  needs: the next step reads the accepted row's slot, nothing is copied);
* ``gated_rms_norm``: the gated RMSNorm of the output with ``silu(z)``.

The conv runs in chunks of rows (``triton_gdn_chunks``: a chunk's loads
ahead of its rows' arithmetic).  The delta rule takes a sequence's rows one
by one in a one-warp program per value tile, each row's inputs loaded while
the row before it updates and stores its state; a long prefill of a small
batch takes the chunked matrix form in two launches instead
(``takes_chunked``, ``triton_gdn_wy``).

A slot outside ``[0, num_slots)`` (-1 among them) reads the zero state and
writes nothing; no load or store leaves its tensor whatever the slot values
are.  Every load of a row or channel is masked.  A program reads its whole
initial state before it writes any row's state, so a forward may write the
slot it reads (plain decoding with one slot per sequence); as in the torch
path's contract, the slots written must be distinct, and no sequence may
write a slot another sequence reads (programs of different sequences run in
any order).  Shapes depend
only on the batch layout, so the kernels capture in a CUDA graph.

This module is imported only where Triton is; ``TRITON_INTERPRET=1`` runs it
on the CPU, which is how the tests compare it with the torch path.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .triton_gdn_chunks import _conv_chunks_kernel
from .triton_gdn_prefill import _state_tile

__all__ = ["conv_slots", "delta_rule_slots", "gated_rms_norm"]


def _pow2(n: int) -> int:
    return triton.next_power_of_2(max(int(n), 1))


TARGET_PROGRAMS = 132  # one wave of an H200's SMs: a small batch splits its work finer than a large one


def _channels_per_program(batch: int, channels: int) -> int:
    """The conv's channel tile: 128, narrowed to 32 while the batch would fill less than two waves."""
    bc = 128
    while bc > 32 and batch * triton.cdiv(channels, bc) < 2 * TARGET_PROGRAMS:
        bc //= 2
    return bc


def _values_per_program(batch: int, heads: int, dv: int) -> int:
    """The delta rule's value tile (a program is one warp): 32, narrowed to 16 while the batch would fill less
    than one wave (``benchmarks/gdn_ab.py`` and ``delta_sweep``'s figures in the hybrid results)."""
    bv = min(_pow2(dv), 32)
    while bv > 16 and batch * heads * triton.cdiv(dv, bv) < TARGET_PROGRAMS:
        bv //= 2
    return bv


# The delta rule's chunked matrix form in two launches (``triton_gdn_wy``) takes a launch of at least
# CHUNKED_FROM_ROWS rows per sequence whose state pass (16-wide value tiles) fits CHUNKED_MAX_PROGRAMS programs: on an
# H100 it ran a 512-row prefill of one sequence 2.9x faster than the row-by-row kernel, and 8 sequences of 128 rows
# (1024 programs) 1.6x slower (``benchmarks/gdn_tile_sweep.py``, ``benchmarks/results/hybrid/gdn_28495f9_h100/``).
CHUNKED_FROM_ROWS: int | None = 64  # None: no launch takes it
CHUNKED_MAX_PROGRAMS = 2 * TARGET_PROGRAMS


def _chunked_warps(batch: int, heads: int, dv: int) -> int:
    """The chunked form's warps: 8 while its state pass fits one wave of programs, else 4 (on an H100, 2 x 512 rows
    259 against 376 us; 1 x 512 rows 181 against 174 us, ``benchmarks/results/hybrid/gdn_035cfd4_h100/``)."""
    return 8 if batch * heads * triton.cdiv(dv, 16) <= TARGET_PROGRAMS else 4


def takes_chunked(batch: int, rows: int, heads: int, dv: int) -> bool:
    """Whether ``delta_rule_slots`` over ``batch`` sequences of ``rows`` rows takes the chunked matrix form."""
    if CHUNKED_FROM_ROWS is None or rows < CHUNKED_FROM_ROWS:
        return False
    return batch * heads * triton.cdiv(dv, 16) <= CHUNKED_MAX_PROGRAMS


def _rows_per_chunk(rows: int) -> int:
    """Rows a program takes at once: a verification's (up to 8) in one chunk, a prefill's in chunks of 8."""
    return min(_pow2(rows), 8)


def conv_slots(
    qkv: torch.Tensor,
    weight: torch.Tensor,
    pool: torch.Tensor,
    rows: torch.Tensor,
    state_read: torch.Tensor,
    state_write: torch.Tensor,
    num_slots: int,
) -> torch.Tensor:
    """``silu(causal_conv1d)`` of each sequence's rows, ``[B, R, C]`` in ``qkv``'s dtype; windows by slot.

    ``qkv [N, C]``, ``weight [C, K]`` (contiguous), ``pool [S + 1, C, K - 1]``
    (contiguous), ``rows [B, R]``, ``state_read [B]``, ``state_write [N]``.
    """
    n, c = qkv.shape
    b, r = rows.shape
    k = weight.shape[-1]
    out = torch.empty(b, r, c, dtype=qkv.dtype, device=qkv.device)
    bc = _channels_per_program(b, c)
    if qkv.stride(1) != 1:
        qkv = qkv.contiguous()
    args = (qkv, weight.reshape(c, k).contiguous(), pool, rows.contiguous(), state_read.contiguous())
    args += (state_write.contiguous(), out, num_slots, n, r, c, qkv.stride(0))
    _conv_chunks_kernel[(triton.cdiv(c, bc), b)](*args, K=k, BC=bc, RP=_rows_per_chunk(r))
    return out


@triton.jit
def _row_inputs(
    mixed,
    a_raw,
    b_raw,
    rows,
    state_write,
    b,
    i,
    R,
    N,
    num_slots,
    stride_ab,
    hk,
    hv,
    offs_k,
    offs_v,
    mask_k,
    mask_v,
    C: tl.constexpr,
    QK: tl.constexpr,
    DK: tl.constexpr,
    DV: tl.constexpr,
):
    """Row ``i``'s inputs of sequence ``b`` as loaded (past ``R``: masked, no output row, no write slot): its
    output row (-1: none), q, k, v, the gates' raw a and b, and its write slot (-1: none)."""
    ok = i < R
    n = tl.load(rows + b * R + tl.minimum(i, R - 1), mask=ok, other=-1)
    n_ok = ok & (n >= 0) & (n < N)
    n_safe = tl.where(n_ok, n, 0).to(tl.int64)
    src = mixed + (b * R + tl.minimum(i, R - 1)).to(tl.int64) * C
    q = tl.load(src + hk * DK + offs_k, mask=mask_k & ok, other=0.0)
    k = tl.load(src + QK + hk * DK + offs_k, mask=mask_k & ok, other=0.0)
    v = tl.load(src + 2 * QK + hv * DV + offs_v, mask=mask_v & ok, other=0.0)
    a = tl.load(a_raw + n_safe * stride_ab + hv, mask=n_ok, other=0.0)
    b_gate = tl.load(b_raw + n_safe * stride_ab + hv, mask=n_ok, other=0.0)
    w = tl.load(state_write + n_safe, mask=n_ok, other=-1)
    w = tl.where(n_ok & (w >= 0) & (w < num_slots), w, -1)
    return tl.where(n_ok, n_safe, -1), q, k, v, a, b_gate, w


@triton.jit
def _delta_rule_slots_kernel(
    mixed,  # [B, R, C] conv output: q | k | v
    a_raw,  # [N, HV] in_proj_a's output
    b_raw,  # [N, HV] in_proj_b's output
    a_log,  # [HV]
    dt_bias,  # [HV]
    pool,  # [S + 1, HV, DK, DV] float32 (the layer's)
    rows,  # [B, R]
    state_read,  # [B]
    state_write,  # [N]
    out,  # [N, HV, DV] float32, zero where no sequence owns the row
    num_slots,
    N,
    R,
    scale,
    stride_ab,  # a_raw's and b_raw's row stride
    HV: tl.constexpr,
    GROUP: tl.constexpr,  # value heads per key head
    DK: tl.constexpr,
    DV: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
):
    bh = tl.program_id(1)
    b, hv = bh // HV, bh % HV
    hk = hv // GROUP
    C: tl.constexpr = 2 * (HV // GROUP) * DK + HV * DV
    QK: tl.constexpr = (HV // GROUP) * DK
    offs_k, mask_k, offs_v, mask_v, mask_h, tile, head, h = _state_tile(
        pool, state_read, b, hv, num_slots, HV, DK, DV, BK, BV
    )
    decay = -tl.exp(tl.load(a_log + hv).to(tl.float32))
    bias = tl.load(dt_bias + hv).to(tl.float32)
    geometry = (R, N, num_slots, stride_ab, hk, hv, offs_k, offs_v, mask_k, mask_v, C, QK, DK, DV)
    dst, q, k, v, a, b_gate, w = _row_inputs(mixed, a_raw, b_raw, rows, state_write, b, 0, *geometry)
    i = 0
    while i < R:
        # row i + 1's inputs load before row i's stores (which may alias them as far as the compiler knows), so
        # they are in flight during row i's update instead of after it
        nxt = _row_inputs(mixed, a_raw, b_raw, rows, state_write, b, i + 1, *geometry)
        q = q.to(tl.float32)
        k = k.to(tl.float32)
        q = q / tl.sqrt(tl.sum(q * q) + 1e-6) * scale
        k = k / tl.sqrt(tl.sum(k * k) + 1e-6)
        a = a.to(tl.float32) + bias
        softplus = tl.where(a > 20.0, a, tl.log(1.0 + tl.exp(tl.minimum(a, 20.0))))
        beta = 1.0 / (1.0 + tl.exp(-b_gate.to(tl.float32)))
        h = h * tl.exp(decay * softplus)
        kv_mem = tl.sum(h * k[:, None], axis=0)
        h = h + k[:, None] * ((v.to(tl.float32) - kv_mem) * beta)[None, :]
        o = tl.sum(h * q[:, None], axis=0)
        tl.store(out + (tl.maximum(dst, 0) * HV + hv) * DV + offs_v, o, mask=(dst >= 0) & mask_v)
        w_base = pool + tl.maximum(w, 0).to(tl.int64) * HV * DK * DV + head
        tl.store(w_base + tile, h, mask=(w >= 0) & mask_h)
        dst, q, k, v, a, b_gate, w = nxt
        i += 1


def delta_rule_slots(
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
) -> torch.Tensor:
    """The gated delta rule over each sequence's rows, ``[N, HV, DV]`` float32 (zero on unowned rows).

    ``mixed [B, R, C]`` (the conv output, contiguous), ``a_raw, b_raw [N, HV]``,
    ``pool [S + 1, HV, DK, DV]`` float32 (contiguous); the state after row
    ``n`` goes to ``state_write[n]``'s slot.
    """
    b, r, _ = mixed.shape
    if takes_chunked(b, r, a_raw.shape[1], pool.shape[-1]):
        from .triton_gdn_wy import delta_rule_wy

        args = (mixed, a_raw, b_raw, a_log, dt_bias, pool, rows, state_read, state_write, num_slots, key_heads)
        return delta_rule_wy(*args, key_dim, num_warps=_chunked_warps(b, a_raw.shape[1], pool.shape[-1]))
    n, hv = a_raw.shape
    if a_raw.stride(1) != 1 or b_raw.stride(1) != 1 or a_raw.stride(0) != b_raw.stride(0):
        a_raw, b_raw = a_raw.contiguous(), b_raw.contiguous()
    dv = pool.shape[-1]
    out = torch.zeros(n, hv, dv, dtype=torch.float32, device=mixed.device)
    bv = _values_per_program(b, hv, dv)
    args = (mixed.contiguous(), a_raw, b_raw, a_log, dt_bias, pool, rows.contiguous(), state_read.contiguous())
    args += (state_write.contiguous(), out, num_slots, n, r, key_dim**-0.5, a_raw.stride(0))
    shape = dict(HV=hv, GROUP=hv // key_heads, DK=key_dim, DV=dv, BK=_pow2(key_dim), BV=bv, num_warps=1)
    _delta_rule_slots_kernel[(triton.cdiv(dv, bv), b * hv)](*args, **shape)
    return out


@triton.jit
def _gated_rms_norm_kernel(o, z, weight, out, eps, stride_z, HV: tl.constexpr, DV: tl.constexpr, BV: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # one (token, head) pair
    zrow = (row // HV) * stride_z + (row % HV) * DV
    offs = tl.arange(0, BV)
    mask = offs < DV
    x = tl.load(o + row * DV + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(z + zrow + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(weight + offs, mask=mask, other=0.0)
    x = x.to(out.dtype.element_ty).to(tl.float32)  # the torch path rounds o to the model's dtype first
    normed = x / tl.sqrt(tl.sum(x * x) / DV + eps)
    y = (w * normed.to(out.dtype.element_ty)).to(tl.float32) * (g / (1.0 + tl.exp(-g)))
    tl.store(out + row * DV + offs, y.to(out.dtype.element_ty), mask=mask)


def gated_rms_norm(o: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``weight * rmsnorm(o) * silu(z)`` per head, ``o [N, HV, DV]`` float32, ``z [N, HV * DV]`` (rows may be
    strided) in the model's dtype; ``[N, HV * DV]``."""
    n, hv, dv = o.shape
    z = z.reshape(n, hv * dv) if z.dim() == 3 else z
    if z.stride(1) != 1:
        z = z.contiguous()
    out = torch.empty(n, hv * dv, dtype=z.dtype, device=z.device)
    _gated_rms_norm_kernel[(n * hv,)](o, z, weight, out, eps, z.stride(0), HV=hv, DV=dv, BV=_pow2(dv))
    return out
