"""The Triton paged attention of the fast decoder forward (CUDA; ``triton_kernels.py`` has the other kernels).

``paged_attention``: causal GQA that reads K/V through the block table chunk
by chunk up to the sequence's length (never the table's whole capacity), with
an online softmax in float32 and, when there are few sequences, the keys
split over programs and merged by ``attention_merge``.  Every load is masked:
a block entry below 0, a position at or past ``BT * BS`` or past the
sequence's length is never read.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

__all__ = ["INTERPRETED", "Tiling", "attention_tiles", "num_splits", "paged_attention", "pow2"]

BLOCK_N = 64  # keys per attention chunk
MAX_BLOCK_M = 64  # query rows per attention program; wider batches (a prefill) take more tiles
# float32: at most 32 query rows per program, and the dots as three TF32 tensor-core products ("tf32x3").
# benchmarks/attention_sweep.py on an H200 (16 query heads over 8 KV heads of 128): a 2048-row prefill chunk
# 28.9 ms with 64 rows and IEEE FMA dots (the registers spill), 2.5 ms with 32 rows, 0.87 ms with tf32x3; a
# verify step of 32 x 4 rows over ~1000 keys 394 us -> 137 us.  The error against float64 stays float32's
# (1.3e-6 against IEEE's 0.9e-6 at 2048 rows).  benchmarks/results/attention/0f98de1/ holds the run.
WIDE_BLOCK_M = 32
WIDE_PRECISION = "tf32x3"
TARGET_PROGRAMS = 132  # one wave of an H200's SMs
MAX_SPLITS = 16
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def pow2(n: int, least: int = 1) -> int:
    return max(least, 1 << max(0, math.ceil(math.log2(max(n, 1)))))


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
    kv_start,
    scale,
    num_slots,
    KVH: tl.constexpr,
    D: tl.constexpr,
    BS: tl.constexpr,
    BT: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """Keys ``c * BLOCK_N ..`` folded into the online softmax ``(m_i, l_i, acc)``; keys below ``kv_start``
    are not attended."""
    d = tl.arange(0, D)
    kpos = c * BLOCK_N + tl.arange(0, BLOCK_N)
    in_seq = kpos < kv_len
    entry = tl.load(block_table + b * BT + kpos // BS, mask=in_seq, other=-1).to(tl.int64)
    slot = entry * BS + kpos % BS
    k_ok = in_seq & (entry >= 0) & (slot < num_slots)
    base = (slot * KVH + kvh)[:, None] * D + d[None, :]
    kt = tl.load(k_cache + base, mask=k_ok[:, None], other=0.0)
    vt = tl.load(v_cache + base, mask=k_ok[:, None], other=0.0)
    if PRECISION == "ieee":
        s = tl.dot(qt, tl.trans(kt), input_precision="ieee")
    elif PRECISION == "tf32x3":
        s = tl.dot(qt, tl.trans(kt), input_precision="tf32x3")
    else:
        s = tl.dot(qt, tl.trans(kt))
    visible = k_ok[None, :] & (kpos[None, :] <= q_pos[:, None]) & (kpos[None, :] >= kv_start)
    s = tl.where(visible, s * scale, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.exp(s - m_safe[:, None])
    alpha = tl.exp(m_i - m_safe)
    if PRECISION == "ieee":
        pv = tl.dot(p.to(vt.dtype), vt, input_precision="ieee")
    elif PRECISION == "tf32x3":
        pv = tl.dot(p.to(vt.dtype), vt, input_precision="tf32x3")
    else:
        pv = tl.dot(p.to(vt.dtype), vt)
    return m_new, l_i * alpha + tl.sum(p, 1), acc * alpha[:, None] + pv


# the row count, the tiles, the first key and the cache size vary from call to call (a prefill chunk's
# length, a cache's capacity): not specialized, so a new value compiles nothing; only the few BLOCK_M and
# NSPLIT constants derived from them select a variant
@triton.jit(do_not_specialize=["R", "MT", "kv_start", "num_slots"])
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
    kv_start,
    R,
    G: tl.constexpr,
    H: tl.constexpr,
    KVH: tl.constexpr,
    D: tl.constexpr,
    BS: tl.constexpr,
    BT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    MT,
    BLOCK_N: tl.constexpr,
    NSPLIT: tl.constexpr,
    PRECISION: tl.constexpr,
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
                kv_start,
                scale,
                num_slots,
                KVH,
                D,
                BS,
                BT,
                BLOCK_N,
                PRECISION,
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
                kv_start,
                scale,
                num_slots,
                KVH,
                D,
                BS,
                BT,
                BLOCK_N,
                PRECISION,
            )
    if NSPLIT == 1:
        o = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        tl.store(out + (row * H + head)[:, None] * D + d[None, :], o.to(out.dtype.element_ty), mask=m_ok[:, None])
    else:
        p_row = ((b * KVH + kvh) * MT + tile) * NSPLIT + split
        tl.store(part_m + p_row * BLOCK_M + tl.arange(0, BLOCK_M), m_i)
        tl.store(part_l + p_row * BLOCK_M + tl.arange(0, BLOCK_M), l_i)
        tl.store(part_acc + (p_row * BLOCK_M + tl.arange(0, BLOCK_M))[:, None] * D + d[None, :], acc)


@triton.jit(do_not_specialize=["R", "MT"])
def _attention_merge_kernel(
    part_m,
    part_l,
    part_acc,
    query_start_loc,
    out,
    R,
    G: tl.constexpr,
    H: tl.constexpr,
    KVH: tl.constexpr,
    D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    MT,
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


@dataclass(frozen=True)
class Tiling:
    """Overrides of ``paged_attention``'s launch (None: its own choice).  ``precision``: a float32 dot's
    ``input_precision`` (``WIDE_PRECISION`` by default; ``"ieee"``: FMA, no tensor cores)."""

    block_m: int | None = None
    block_n: int | None = None
    num_warps: int | None = None
    num_stages: int | None = None
    splits: int | None = None
    precision: str | None = None

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n", "splits"):
            v = getattr(self, name)
            if v is not None and (v < 1 or v & (v - 1) or (name != "splits" and v < 16)):
                least = "1" if name == "splits" else "16"
                raise ValueError(f"Tiling.{name} must be a power of two >= {least}, got {v}")
        if self.num_warps is not None and self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"Tiling.num_warps must be 1, 2, 4, 8 or 16, got {self.num_warps}")
        if self.num_stages is not None and self.num_stages < 1:
            raise ValueError(f"Tiling.num_stages must be >= 1, got {self.num_stages}")
        if self.precision not in (None, "", "ieee", "tf32x3", "tf32"):
            raise ValueError(f"Tiling.precision must be 'ieee', 'tf32x3' or 'tf32', got {self.precision!r}")


def attention_tiles(rows_per_seq: int, group: int, max_block_m: int | None = None) -> tuple[int, int]:
    """``(BLOCK_M, tiles)``: query rows (row x head of a KV group) per program, and programs per group."""
    rows = rows_per_seq * group
    block_m = min(max_block_m or MAX_BLOCK_M, pow2(rows, 16))
    return block_m, -(-rows // block_m)


def num_splits(programs: int, max_len: int) -> int:
    """Key splits per program (a power of two): enough to fill the GPU, never more than chunks."""
    want = pow2(-(-TARGET_PROGRAMS // max(1, programs)))
    return max(1, min(want, pow2(-(-max_len // BLOCK_N)), MAX_SPLITS))


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
    kv_start: int = 0,
    *,
    tiling: Tiling | None = None,
) -> torch.Tensor:
    """``q [N, H, D]`` over the paged cache ``[S+1, KVH, D]`` -> ``[N, H, D]`` (rows not in a sequence: 0);
    keys at positions below ``kv_start`` are not attended (an MTP head's cache that begins at position 1).
    ``tiling`` overrides the launch's choices (``benchmarks/attention_sweep.py`` measures them)."""
    n, h, d = q.shape
    b, bt = block_table.shape
    kvh = k_cache.shape[1]
    g = h // kvh
    out = torch.zeros_like(q) if b * rows_per_seq < n else torch.empty_like(q)
    if b == 0:
        return out
    wide = q.dtype == torch.float32
    t = tiling or Tiling()
    block_m, tiles = attention_tiles(rows_per_seq, g, t.block_m or (WIDE_BLOCK_M if wide else None))
    splits = num_splits(b * kvh * tiles, bt * block_size) if t.splits is None else t.splits
    if splits > 1:
        part_m = torch.empty(b * kvh * tiles * splits * block_m, dtype=torch.float32, device=q.device)
        part_l = torch.empty_like(part_m)
        part_acc = torch.empty(part_m.shape[0], d, dtype=torch.float32, device=q.device)
    else:
        part_m = part_l = part_acc = out
    meta = dict(R=rows_per_seq, G=g, H=h, KVH=kvh, D=d, BLOCK_M=block_m, MT=tiles, NSPLIT=splits)
    launch = {"num_stages": t.num_stages or (2 if wide else 3)}
    if t.num_warps:
        launch["num_warps"] = t.num_warps
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
        kv_start,
        BS=block_size,
        BT=bt,
        BLOCK_N=t.block_n or BLOCK_N,
        PRECISION=t.precision or (WIDE_PRECISION if wide else ""),
        INTERPRET=INTERPRETED,
        **launch,
        **meta,
    )
    if splits > 1:
        _attention_merge_kernel[(b, kvh * tiles, block_m)](
            part_m, part_l, part_acc, query_start_loc, out, num_warps=1, **meta
        )
    return out
