"""The greedy token of each row of logits in two short Triton launches, exactly ``torch.argmax``.

``torch.argmax`` over a few rows of a 150k vocabulary runs one long
reduction per row (8-9 us for the four verify rows of one sequence on an
H200, 16-18 us for 32) and returns int64, which a verify step then casts into
its int32 token buffer with one more kernel.  Here the first launch splits
every row into ``BLOCK``-wide chunks, one program each, and writes each
chunk's best key; the second takes each row's best key over its chunks and
stores the index in the caller's buffer, in its dtype.

A key orders ``(value, -index)`` as one int64: the float32 value's bits,
mapped to a signed integer that orders like the values (``-0.0`` first made
``+0.0``, a NaN above every number), in the high half, and ``2**32 - 1 -
index`` in the low half.  The largest key is the largest value at its lowest
index, a NaN's lowest index if the row has one: ``torch.argmax``'s answer,
ties included.  A lane past the row's end loads ``-inf`` at an index past
every real one, so it never wins.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["BLOCK", "argmax_rows"]

BLOCK = 4096  # vocabulary entries per program of the first launch


@triton.jit
def _chunk_keys(x, keys, V, row_stride, CHUNKS, BLOCK: tl.constexpr):
    """Program (row, chunk): the chunk's largest key into ``keys[row, chunk]``."""
    r = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    offs = c * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + r * row_stride + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
    v = tl.where(v == 0.0, 0.0, v)  # -0.0 and +0.0 compare equal: one key
    bits = v.to(tl.int32, bitcast=True)
    order = bits ^ ((bits >> 31) & 0x7FFFFFFF)  # negative floats: reverse their magnitude bits
    order = tl.where(v != v, 0x7FFFFFFF, order)  # a NaN is the largest
    key = (order.to(tl.int64) << 32) | (4294967295 - offs.to(tl.int64))
    tl.store(keys + r * CHUNKS + c, tl.max(key, 0))


@triton.jit
def _row_index(keys, out, CHUNKS, CB: tl.constexpr):
    """Program row: the index of the row's largest key into ``out[row]``."""
    r = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, CB)
    first = tl.load(keys + r * CHUNKS)
    k = tl.load(keys + r * CHUNKS + c, mask=c < CHUNKS, other=0)
    best = tl.max(tl.where(c < CHUNKS, k, first), 0)
    idx = 4294967295 - (best & 4294967295)
    tl.store(out + r, idx.to(out.dtype.element_ty))


def argmax_rows(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``x.argmax(-1)`` for ``x[..., V]`` (any float dtype, unit stride along ``V``); into ``out`` (int32 or
    int64, as many elements as ``x`` has rows, contiguous) when given, else a new int64 tensor."""
    V = x.shape[-1]
    if V == 0 or V > 2**31 - 1:
        raise ValueError(f"argmax_rows: a row of {V} entries (1 .. 2**31 - 1)")
    rows = x.reshape(-1, V) if x.dim() != 2 else x
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    R = rows.shape[0]
    shape = x.shape[:-1]
    if out is None:
        out = torch.empty(shape, dtype=torch.int64, device=x.device)
    elif out.dtype not in (torch.int32, torch.int64) or out.numel() != R or not out.is_contiguous():
        raise ValueError(f"argmax_rows: out must be a contiguous int32/int64 tensor of {R} elements")
    if R == 0:
        return out
    chunks = triton.cdiv(V, BLOCK)
    keys = torch.empty(R, chunks, dtype=torch.int64, device=x.device)
    _chunk_keys[(R, chunks)](rows, keys, V, rows.stride(0), chunks, BLOCK=BLOCK, num_warps=4)
    _row_index[(R,)](keys, out, chunks, CB=triton.next_power_of_2(chunks), num_warps=1)
    return out
