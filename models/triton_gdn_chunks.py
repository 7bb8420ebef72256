"""The Gated DeltaNet conv over chunks of rows.

A program takes a sequence's rows in chunks of ``RP`` (up to 8; one chunk
for a verification): the chunk's row indices, inputs and write slots load
together before its rows' arithmetic, so no row waits on the loads of the
row before it.  The conv keeps a chunk's rows, its window and its taps as
tuples of channel vectors (unrolled): nothing reduces across threads, so it
needs no shared memory and no barrier (picking a row out of a tile with a
row axis would reduce across warps).  The semantics and the slot rules are
those of ``triton_gdn``'s contract (the tests hold it against the torch path;
``benchmarks/gdn_ab.py`` compares it with an earlier module).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _conv_chunks_kernel(
    qkv,  # [N, C] the in-projection's output, flat rows
    weight,  # [C, K] depthwise taps
    pool,  # [S + 1, C, K - 1] conv windows (the layer's)
    rows,  # [B, R] flat row of each sequence row
    state_read,  # [B]
    state_write,  # [N]
    out,  # [B, R, C] silu(conv), contiguous
    num_slots,
    N,
    R,
    C,
    stride_n,  # qkv's row stride
    K: tl.constexpr,
    BC: tl.constexpr,
    RP: tl.constexpr,  # rows per chunk
):
    b = tl.program_id(1)
    offs_c = tl.program_id(0) * BC + tl.arange(0, BC)
    mask_c = offs_c < C
    slot = tl.load(state_read + b)
    live = (slot >= 0) & (slot < num_slots)
    base = pool + tl.where(live, slot, 0).to(tl.int64) * C * (K - 1) + offs_c * (K - 1)
    # the whole initial window first: a row may write the slot read here
    win = ()
    for j in tl.static_range(K - 1):
        win = win + (tl.load(base + j, mask=live & mask_c, other=0.0).to(tl.float32),)
    taps = ()
    for j in tl.static_range(K):
        taps = taps + (tl.load(weight + offs_c * K + j, mask=mask_c, other=0.0).to(tl.float32),)
    i = 0
    while i < R:  # a while loop: Triton's interpreter takes no tensor bound in range()
        xs = ()
        slots = ()
        for r in tl.static_range(RP):
            row_ok = i + r < R
            n = tl.load(rows + b * R + i + r, mask=row_ok, other=-1)
            n_ok = row_ok & (n >= 0) & (n < N)
            n_safe = tl.where(n_ok, n, 0)
            x = tl.load(qkv + n_safe.to(tl.int64) * stride_n + offs_c, mask=n_ok & mask_c, other=0.0)
            xs = xs + (x.to(tl.float32),)
            ws = tl.load(state_write + n_safe, mask=n_ok, other=-1)
            slots = slots + (tl.where(n_ok & (ws >= 0) & (ws < num_slots), ws, -1),)
        stream = win + xs  # the window's K - 1 entries, then the chunk's rows
        for r in tl.static_range(RP):
            acc = tl.zeros([BC], dtype=tl.float32)
            for j in tl.static_range(K):
                acc += taps[j] * stream[r + j]
            y = acc / (1.0 + tl.exp(-acc))
            tl.store(
                out + (b * R + i + r).to(tl.int64) * C + offs_c, y.to(out.dtype.element_ty), mask=(i + r < R) & mask_c
            )
            # the window after row r: stream positions r + 1 .. r + K - 1
            w_base = pool + tl.maximum(slots[r], 0).to(tl.int64) * C * (K - 1) + offs_c * (K - 1)
            for j in tl.static_range(K - 1):
                tl.store(w_base + j, stream[r + 1 + j].to(pool.dtype.element_ty), mask=(slots[r] >= 0) & mask_c)
        # the next chunk's window: stream positions RP .. RP + K - 2 (a chunk that is not full is the last)
        carry = ()
        for j in tl.static_range(K - 1):
            carry = carry + (stream[RP + j],)
        win = carry
        i += RP
