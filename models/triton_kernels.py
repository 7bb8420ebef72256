"""Triton kernels of the fast decoder forward (CUDA; the CPU keeps the exact torch path).

Four kernels replace the chains of small torch ops around the GEMMs of a layer:

* ``qk_norm_rope_store``: per-head RMS norm of q and k, rotate-half RoPE from
  the row's position, k and v stored at the row's slot (``-1``: no write);
* ``paged_attention``: causal GQA that reads K/V through the block table
  chunk by chunk up to the sequence's length (never the table's whole
  capacity), with an online softmax in float32 and, when there are few
  sequences, the keys split over programs and merged by ``attention_merge``;
* ``add_rms_norm``: the residual add and the next RMS norm in one pass;
* ``silu_mul``: ``silu(gate) * up`` over the fused gate-up projection.

Every load is masked: a block entry below 0, a position at or past
``BT * BS`` or past the sequence's length is never read.  Kernels compile on
first use (Triton's JIT, cached on disk) during warm-up, before any capture.
This module is imported only where Triton is; ``TRITON_INTERPRET=1`` runs it
on the CPU, which is how the tests compare it with the torch path.
"""

from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl

BLOCK_N = 64  # keys per attention chunk
MAX_BLOCK_M = 64  # query rows per attention program; wider batches (a prefill) take more tiles
TARGET_PROGRAMS = 132  # one wave of an H200's SMs
MAX_SPLITS = 16
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


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


@triton.jit
def _attend_chunk(
    c,
    qt,
    q_pos,
    m_i,
    l_i,
    acc,
    k_cache,
    v_cache,
    block_table,
    b,
    kvh,
    kv_len,
    scale,
    num_slots,
    KVH: tl.constexpr,
    D: tl.constexpr,
    BS: tl.constexpr,
    BT: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IEEE: tl.constexpr,
):
    """Keys ``c * BLOCK_N ..`` folded into the online softmax ``(m_i, l_i, acc)``."""
    d = tl.arange(0, D)
    kpos = c * BLOCK_N + tl.arange(0, BLOCK_N)
    in_seq = kpos < kv_len
    entry = tl.load(block_table + b * BT + kpos // BS, mask=in_seq, other=-1).to(tl.int64)
    slot = entry * BS + kpos % BS
    k_ok = in_seq & (entry >= 0) & (slot < num_slots)
    base = (slot * KVH + kvh)[:, None] * D + d[None, :]
    kt = tl.load(k_cache + base, mask=k_ok[:, None], other=0.0)
    vt = tl.load(v_cache + base, mask=k_ok[:, None], other=0.0)
    if IEEE:
        s = tl.dot(qt, tl.trans(kt), input_precision="ieee")
    else:
        s = tl.dot(qt, tl.trans(kt))
    visible = k_ok[None, :] & (kpos[None, :] <= q_pos[:, None])
    s = tl.where(visible, s * scale, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.exp(s - m_safe[:, None])
    alpha = tl.exp(m_i - m_safe)
    if IEEE:
        pv = tl.dot(p.to(vt.dtype), vt, input_precision="ieee")
    else:
        pv = tl.dot(p.to(vt.dtype), vt)
    return m_new, l_i * alpha + tl.sum(p, 1), acc * alpha[:, None] + pv


@triton.jit
def _paged_attention_kernel(
    q,
    k_cache,
    v_cache,
    block_table,
    kv_lens,
    positions,
    query_start_loc,
    out,
    part_m,
    part_l,
    part_acc,
    scale,
    num_slots,
    R: tl.constexpr,
    G: tl.constexpr,
    H: tl.constexpr,
    KVH: tl.constexpr,
    D: tl.constexpr,
    BS: tl.constexpr,
    BT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    MT: tl.constexpr,
    BLOCK_N: tl.constexpr,
    NSPLIT: tl.constexpr,
    IEEE: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    """Program (b, kvh * MT + tile, split): query rows ``m = r * G + g`` of the tile, keys of the split."""
    b = tl.program_id(0).to(tl.int64)
    kvh = tl.program_id(1) // MT
    tile = tl.program_id(1) % MT
    split = tl.program_id(2)
    m = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    m_ok = m < R * G
    r, g = m // G, m % G
    row = tl.load(query_start_loc + b).to(tl.int64) + r
    head = kvh * G + g
    d = tl.arange(0, D)
    qt = tl.load(q + (row * H + head)[:, None] * D + d[None, :], mask=m_ok[:, None], other=0.0)
    q_pos = tl.load(positions + row, mask=m_ok, other=-1).to(tl.int64)
    # keys past the tile's last query position or the table's capacity are never read
    kv_len = tl.minimum(tl.load(kv_lens + b).to(tl.int64), tl.max(q_pos, 0) + 1)
    kv_len = tl.minimum(kv_len, BT * BS)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    n_chunks = tl.cdiv(kv_len, BLOCK_N)
    if INTERPRET:  # the interpreter cannot take tensor bounds in range(); same chunks, same order
        c = split
        while c < n_chunks:
            m_i, l_i, acc = _attend_chunk(
                c,
                qt,
                q_pos,
                m_i,
                l_i,
                acc,
                k_cache,
                v_cache,
                block_table,
                b,
                kvh,
                kv_len,
                scale,
                num_slots,
                KVH,
                D,
                BS,
                BT,
                BLOCK_N,
                IEEE,
            )
            c += NSPLIT
    else:
        for c in range(split, n_chunks, NSPLIT):  # a for loop: Triton pipelines its loads
            m_i, l_i, acc = _attend_chunk(
                c,
                qt,
                q_pos,
                m_i,
                l_i,
                acc,
                k_cache,
                v_cache,
                block_table,
                b,
                kvh,
                kv_len,
                scale,
                num_slots,
                KVH,
                D,
                BS,
                BT,
                BLOCK_N,
                IEEE,
            )
    if NSPLIT == 1:
        o = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        tl.store(out + (row * H + head)[:, None] * D + d[None, :], o.to(out.dtype.element_ty), mask=m_ok[:, None])
    else:
        p_row = ((b * KVH + kvh) * MT + tile) * NSPLIT + split
        tl.store(part_m + p_row * BLOCK_M + tl.arange(0, BLOCK_M), m_i)
        tl.store(part_l + p_row * BLOCK_M + tl.arange(0, BLOCK_M), l_i)
        tl.store(part_acc + (p_row * BLOCK_M + tl.arange(0, BLOCK_M))[:, None] * D + d[None, :], acc)


@triton.jit
def _attention_merge_kernel(
    part_m,
    part_l,
    part_acc,
    query_start_loc,
    out,
    R: tl.constexpr,
    G: tl.constexpr,
    H: tl.constexpr,
    KVH: tl.constexpr,
    D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    MT: tl.constexpr,
    NSPLIT: tl.constexpr,
):
    """Program (b, kvh * MT + tile, j): query row ``m = tile * BLOCK_M + j``, its splits merged."""
    b = tl.program_id(0).to(tl.int64)
    kvh = tl.program_id(1) // MT
    tile = tl.program_id(1) % MT
    j = tl.program_id(2)
    m = tile * BLOCK_M + j
    if m < R * G:
        sp = tl.arange(0, NSPLIT)
        at = (((b * KVH + kvh) * MT + tile) * NSPLIT + sp) * BLOCK_M + j  # [NSPLIT]
        ms = tl.load(part_m + at)
        top = tl.max(ms, 0)
        w = tl.exp(ms - tl.where(top == float("-inf"), 0.0, top))
        l_sum = tl.sum(w * tl.load(part_l + at), 0)
        d = tl.arange(0, D)
        acc = tl.sum(w[:, None] * tl.load(part_acc + at[:, None] * D + d[None, :]), 0)
        row = tl.load(query_start_loc + b).to(tl.int64) + m // G
        o = acc / tl.where(l_sum > 0, l_sum, 1.0)
        tl.store(out + (row * H + kvh * G + m % G) * D + d, o.to(out.dtype.element_ty))


@triton.jit
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


def _pow2(n: int, least: int = 1) -> int:
    return max(least, 1 << max(0, math.ceil(math.log2(max(n, 1)))))


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


def attention_tiles(rows_per_seq: int, group: int) -> tuple[int, int]:
    """``(BLOCK_M, tiles)``: query rows (row x head of a KV group) per program, and programs per group."""
    rows = rows_per_seq * group
    block_m = min(MAX_BLOCK_M, _pow2(rows, 16))
    return block_m, -(-rows // block_m)


def num_splits(programs: int, max_len: int) -> int:
    """Key splits per program (a power of two): enough to fill the GPU, never more than chunks."""
    want = _pow2(-(-TARGET_PROGRAMS // max(1, programs)))
    return max(1, min(want, _pow2(-(-max_len // BLOCK_N)), MAX_SPLITS))


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    kv_lens: torch.Tensor,
    positions: torch.Tensor,
    query_start_loc: torch.Tensor,
    rows_per_seq: int,
    block_size: int,
) -> torch.Tensor:
    """``q [N, H, D]`` over the paged cache ``[S+1, KVH, D]`` -> ``[N, H, D]`` (rows not in a sequence: 0)."""
    n, h, d = q.shape
    b, bt = block_table.shape
    kvh = k_cache.shape[1]
    g = h // kvh
    out = torch.zeros_like(q) if b * rows_per_seq < n else torch.empty_like(q)
    if b == 0:
        return out
    block_m, tiles = attention_tiles(rows_per_seq, g)
    splits = num_splits(b * kvh * tiles, bt * block_size)
    if splits > 1:
        part_m = torch.empty(b * kvh * tiles * splits * block_m, dtype=torch.float32, device=q.device)
        part_l = torch.empty_like(part_m)
        part_acc = torch.empty(part_m.shape[0], d, dtype=torch.float32, device=q.device)
    else:
        part_m = part_l = part_acc = out
    meta = dict(R=rows_per_seq, G=g, H=h, KVH=kvh, D=d, BLOCK_M=block_m, MT=tiles, NSPLIT=splits)
    wide = q.dtype == torch.float32
    _paged_attention_kernel[(b, kvh * tiles, splits)](
        q,
        k_cache,
        v_cache,
        block_table,
        kv_lens,
        positions,
        query_start_loc,
        out,
        part_m,
        part_l,
        part_acc,
        d**-0.5,
        k_cache.shape[0] - 1,
        BS=block_size,
        BT=bt,
        BLOCK_N=BLOCK_N,
        IEEE=wide,
        INTERPRET=INTERPRETED,
        num_stages=2 if wide else 3,
        **meta,
    )
    if splits > 1:
        _attention_merge_kernel[(b, kvh * tiles, block_m)](
            part_m, part_l, part_acc, query_start_loc, out, num_warps=1, **meta
        )
    return out


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
            BLOCK=_pow2(hid),
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
