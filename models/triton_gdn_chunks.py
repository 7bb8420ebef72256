"""The Gated DeltaNet slot kernels over chunks of rows.

A program takes a sequence's rows in chunks of ``RP`` (up to 8; one chunk
for a verification): the chunk's row indices, inputs and write slots load
together before its rows' arithmetic, so no row waits on the loads of the
row before it.  The conv keeps a chunk's rows, its window and its taps as
tuples of channel vectors (unrolled): nothing reduces across threads, so it
needs no shared memory and no barrier (picking a row out of a tile with a
row axis would reduce across warps).  The delta rule keeps the chunk's gates
and slots as ``[RP]`` vectors.  The semantics, the slot rules and every
output bit are those of ``triton_gdn``'s contract (the tests hold both
against the torch path; ``benchmarks/gdn_ab.py`` compares them with an
earlier module).
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


@triton.jit
def _delta_rule_chunks_kernel(
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
    RP: tl.constexpr,  # rows per chunk (see the conv)
):
    bh = tl.program_id(1)
    b, hv = bh // HV, bh % HV
    hk = hv // GROUP
    C: tl.constexpr = 2 * (HV // GROUP) * DK + HV * DV
    QK: tl.constexpr = (HV // GROUP) * DK
    offs_k = tl.arange(0, BK)
    offs_v = tl.program_id(0) * BV + tl.arange(0, BV)
    mask_k, mask_v = offs_k < DK, offs_v < DV
    mask_h = mask_k[:, None] & mask_v[None, :]
    tile = offs_k[:, None] * DV + offs_v[None, :]
    slot = tl.load(state_read + b)
    live = (slot >= 0) & (slot < num_slots)
    head = (hv * DK * DV).to(tl.int64)
    h = tl.load(pool + tl.where(live, slot, 0).to(tl.int64) * HV * DK * DV + head + tile, mask=live & mask_h, other=0.0)
    decay = -tl.exp(tl.load(a_log + hv).to(tl.float32))
    bias = tl.load(dt_bias + hv).to(tl.float32)
    rr = tl.arange(0, RP)
    i = 0
    while i < R:
        # the chunk's row indices, gates and write slots at once, ahead of the recurrence
        r_ok = i + rr < R
        n = tl.load(rows + b * R + i + rr, mask=r_ok, other=-1)
        n_ok = r_ok & (n >= 0) & (n < N)
        n_safe = tl.where(n_ok, n, 0).to(tl.int64)
        a = tl.load(a_raw + n_safe * stride_ab + hv, mask=n_ok, other=0.0).to(tl.float32) + bias
        softplus = tl.where(a > 20.0, a, tl.log(1.0 + tl.exp(tl.minimum(a, 20.0))))
        gate = tl.exp(decay * softplus)
        beta = 1.0 / (1.0 + tl.exp(-tl.load(b_raw + n_safe * stride_ab + hv, mask=n_ok, other=0.0).to(tl.float32)))
        w_slot = tl.load(state_write + n_safe, mask=n_ok, other=-1)
        w_slot = tl.where(n_ok & (w_slot >= 0) & (w_slot < num_slots), w_slot, -1)
        dst = tl.where(n_ok, n_safe, -1)
        for r in tl.static_range(RP):
            src = mixed + (b * R + tl.minimum(i + r, R - 1)).to(tl.int64) * C
            q = tl.load(src + hk * DK + offs_k, mask=mask_k, other=0.0).to(tl.float32)
            k = tl.load(src + QK + hk * DK + offs_k, mask=mask_k, other=0.0).to(tl.float32)
            v = tl.load(src + 2 * QK + hv * DV + offs_v, mask=mask_v, other=0.0).to(tl.float32)
            q = q / tl.sqrt(tl.sum(q * q) + 1e-6) * scale
            k = k / tl.sqrt(tl.sum(k * k) + 1e-6)
            here = rr == r
            h_r = h * tl.sum(tl.where(here, gate, 0.0), axis=0)
            kv_mem = tl.sum(h_r * k[:, None], axis=0)
            h_r = h_r + k[:, None] * ((v - kv_mem) * tl.sum(tl.where(here, beta, 0.0), axis=0))[None, :]
            o = tl.sum(h_r * q[:, None], axis=0)
            row = tl.max(tl.where(here, dst, -1), axis=0)
            tl.store(out + (tl.maximum(row, 0) * HV + hv) * DV + offs_v, o, mask=(row >= 0) & mask_v)
            ws = tl.max(tl.where(here, w_slot, -1), axis=0)
            w_base = pool + tl.maximum(ws, 0).to(tl.int64) * HV * DK * DV + head
            tl.store(w_base + tile, h_r, mask=(ws >= 0) & mask_h)
            h = tl.where(i + r < R, h_r, h)  # a chunk's rows past R leave the state as it is
        i += RP
