"""Candidates for the delta rule at fd3d406 (recorded): a chunk of rows loaded as [RP, K] tiles (not timed: its
 row extraction reduces across threads; 119 barriers at 4 warps), and the pipelined row loop that 02cea21 adopted."""
import triton
import triton.language as tl


@triton.jit
def _delta_rule_prefetch_kernel(
    mixed, a_raw, b_raw, a_log, dt_bias, pool, rows, state_read, state_write, out,
    num_slots, N, R, scale, stride_ab,
    HV: tl.constexpr, GROUP: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, BK: tl.constexpr,
    BV: tl.constexpr, RP: tl.constexpr,
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
        src = mixed + (b * R + tl.minimum(i + rr, R - 1)).to(tl.int64) * C
        qs = tl.load(src[:, None] + hk * DK + offs_k[None, :], mask=mask_k[None, :], other=0.0).to(tl.float32)
        ks = tl.load(src[:, None] + QK + hk * DK + offs_k[None, :], mask=mask_k[None, :], other=0.0).to(tl.float32)
        vs = tl.load(src[:, None] + 2 * QK + hv * DV + offs_v[None, :], mask=mask_v[None, :], other=0.0).to(tl.float32)
        qs = qs / tl.sqrt(tl.sum(qs * qs, axis=1) + 1e-6)[:, None] * scale
        ks = ks / tl.sqrt(tl.sum(ks * ks, axis=1) + 1e-6)[:, None]
        for r in tl.static_range(RP):
            here = rr == r
            q = tl.sum(tl.where(here[:, None], qs, 0.0), axis=0)
            k = tl.sum(tl.where(here[:, None], ks, 0.0), axis=0)
            v = tl.sum(tl.where(here[:, None], vs, 0.0), axis=0)
            h = h * tl.sum(tl.where(here, gate, 0.0), axis=0)
            kv_mem = tl.sum(h * k[:, None], axis=0)
            h = h + k[:, None] * ((v - kv_mem) * tl.sum(tl.where(here, beta, 0.0), axis=0))[None, :]
            o = tl.sum(h * q[:, None], axis=0)
            row = tl.max(tl.where(here, dst, -1), axis=0)
            tl.store(out + (tl.maximum(row, 0) * HV + hv) * DV + offs_v, o, mask=(row >= 0) & mask_v)
            ws = tl.max(tl.where(here, w_slot, -1), axis=0)
            w_base = pool + tl.maximum(ws, 0).to(tl.int64) * HV * DK * DV + head
            tl.store(w_base + tile, h, mask=(ws >= 0) & mask_h)
        i += RP


@triton.jit
def _row_inputs(mixed, a_raw, b_raw, rows, state_write, b, i, R, N, hk, hv, offs_k, offs_v, mask_k, mask_v, stride_ab,
                num_slots, C: tl.constexpr, QK: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr):
    ok = i < R
    n = tl.load(rows + b * R + tl.minimum(i, R - 1), mask=ok, other=-1)
    n_ok = ok & (n >= 0) & (n < N)
    n_safe = tl.where(n_ok, n, 0).to(tl.int64)
    src = mixed + (b * R + tl.minimum(i, R - 1)).to(tl.int64) * C
    q = tl.load(src + hk * DK + offs_k, mask=mask_k & ok, other=0.0)
    k = tl.load(src + QK + hk * DK + offs_k, mask=mask_k & ok, other=0.0)
    v = tl.load(src + 2 * QK + hv * DV + offs_v, mask=mask_v & ok, other=0.0)
    a = tl.load(a_raw + n_safe * stride_ab + hv, mask=n_ok, other=0.0)
    bb = tl.load(b_raw + n_safe * stride_ab + hv, mask=n_ok, other=0.0)
    w = tl.load(state_write + n_safe, mask=n_ok, other=-1)
    w = tl.where(n_ok & (w >= 0) & (w < num_slots), w, -1)
    return tl.where(n_ok, n_safe, -1), q, k, v, a, bb, w


@triton.jit
def _delta_rule_pipe_kernel(
    mixed, a_raw, b_raw, a_log, dt_bias, pool, rows, state_read, state_write, out,
    num_slots, N, R, scale, stride_ab,
    HV: tl.constexpr, GROUP: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, BK: tl.constexpr,
    BV: tl.constexpr,
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
    dst, q, k, v, a, bb, w = _row_inputs(mixed, a_raw, b_raw, rows, state_write, b, 0, R, N, hk, hv, offs_k, offs_v,
                                         mask_k, mask_v, stride_ab, num_slots, C, QK, DK, DV)
    i = 0
    while i < R:
        # the next row's inputs are loaded before this row's stores: they are in flight during its update
        dst_n, q_n, k_n, v_n, a_n, b_n, w_n = _row_inputs(mixed, a_raw, b_raw, rows, state_write, b, i + 1, R, N, hk,
                                                          hv, offs_k, offs_v, mask_k, mask_v, stride_ab, num_slots,
                                                          C, QK, DK, DV)
        qf = q.to(tl.float32)
        kf = k.to(tl.float32)
        qf = qf / tl.sqrt(tl.sum(qf * qf) + 1e-6) * scale
        kf = kf / tl.sqrt(tl.sum(kf * kf) + 1e-6)
        af = a.to(tl.float32) + bias
        softplus = tl.where(af > 20.0, af, tl.log(1.0 + tl.exp(tl.minimum(af, 20.0))))
        beta = 1.0 / (1.0 + tl.exp(-bb.to(tl.float32)))
        h = h * tl.exp(decay * softplus)
        kv_mem = tl.sum(h * kf[:, None], axis=0)
        h = h + kf[:, None] * ((v.to(tl.float32) - kv_mem) * beta)[None, :]
        o = tl.sum(h * qf[:, None], axis=0)
        tl.store(out + (tl.maximum(dst, 0) * HV + hv) * DV + offs_v, o, mask=(dst >= 0) & mask_v)
        w_base = pool + tl.maximum(w, 0).to(tl.int64) * HV * DK * DV + head
        tl.store(w_base + tile, h, mask=(w >= 0) & mask_h)
        dst, q, k, v, a, bb, w = dst_n, q_n, k_n, v_n, a_n, b_n, w_n
        i += 1
