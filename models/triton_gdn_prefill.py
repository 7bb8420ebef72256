"""The gated delta rule over chunks of rows in matrix form, a prefill's delta rule without a per-row recurrence:
the chunk's algebra as ``@triton.jit`` helpers, which ``triton_gdn_wy``'s two launches run, and the read of a
program's state tile that those launches share with ``triton_gdn``'s row-by-row kernel.

``delta_rule_slots`` (``triton_gdn``) takes a sequence's rows one by one: each
row waits for the state the row before it wrote, so a 512-row prefill is 512
dependent updates. Within a chunk of ``CH`` rows the recurrence has a closed
form (``L_t``: the cumulative log decay from the chunk's start, ``h0``: the
state entering the chunk, ``k``, ``q`` L2-normalised, ``q`` scaled):

* the values each row writes, ``u_t = beta_t (v_t - k_t . h_{t-1} decayed)``,
  solve ``(I + diag(beta) A) U = diag(beta) (V - diag(e^L) K h0)`` with
  ``A_ts = e^(L_t - L_s) (k_t . k_s)`` for ``s < t``; the unit
  lower-triangular matrix is inverted by forward substitution, row by row
  (the product form ``(I + X)(I + X^2)...`` loses up to 7e-4 of the inverse
  in float32 through cancellation where consecutive keys nearly coincide;
  forward substitution 2.5e-7);
* the outputs ``O = diag(e^L) Q h0 + (M * Q K^T) U``, ``M_ts = e^(L_t - L_s)``
  for ``s <= t``;
* the state after row ``t``: ``e^(L_t) h0 + K^T (m_t * U)``, ``m_t[s] =
  e^(L_t - L_s)`` for ``s <= t``: the chunk's end always, and any row whose
  write slot is live.

The semantics, the slot rules (a slot outside ``[0, num_slots)`` reads zeros
and writes nothing; the whole initial state is read before any write) and the
arguments are ``delta_rule_slots``'s; only the order of the float32 additions
differs. Rows past ``R`` are the identity (decay 1, ``beta`` 0, ``k`` 0). The
products run in IEEE float32 by default (``precision``).
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["CHUNK", "launch_inputs"]

CHUNK = 16  # rows per chunk: tl.dot's smallest inner dimension


@triton.jit
def _state_tile(
    pool, state_read, b, hv, num_slots, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, BK: tl.constexpr,
    BV: tl.constexpr,
):  # fmt: skip
    """The program's value tile (``program_id(0)``) of head ``hv``'s state, read from sequence ``b``'s slot (the
    zero state for a slot outside ``[0, num_slots)``), with its offsets, masks and addresses within a slot."""
    offs_k = tl.arange(0, BK)
    offs_v = tl.program_id(0) * BV + tl.arange(0, BV)
    mask_k, mask_v = offs_k < DK, offs_v < DV
    mask_h = mask_k[:, None] & mask_v[None, :]
    tile = offs_k[:, None] * DV + offs_v[None, :]
    slot = tl.load(state_read + b)
    live = (slot >= 0) & (slot < num_slots)
    head = (hv * DK * DV).to(tl.int64)
    h = tl.load(pool + tl.where(live, slot, 0).to(tl.int64) * HV * DK * DV + head + tile, mask=live & mask_h, other=0.0)
    return offs_k, mask_k, offs_v, mask_v, mask_h, tile, head, h


@triton.jit
def _chunk_inputs(
    mixed, a_raw, b_raw, rows, b, i, R, N, stride_ab, hk, hv, offs_k, mask_k, offs_v, mask_v, rr, scale, decay, bias,
    C: tl.constexpr, QK: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
):  # fmt: skip
    """Rows ``i .. i + CH - 1`` of sequence ``b`` (past ``R``: the identity): whether each names an output row, that
    row, its L2-normalised q (scaled) and k, its v (the value tile ``offs_v``), its log decay and its beta."""
    r_ok = i + rr < R
    n = tl.load(rows + b * R + i + rr, mask=r_ok, other=-1)
    n_ok = r_ok & (n >= 0) & (n < N)
    n_safe = tl.where(n_ok, n, 0).to(tl.int64)
    src = (b * R + tl.minimum(i + rr, R - 1)).to(tl.int64) * C
    qk_mask = r_ok[:, None] & mask_k[None, :]
    q = tl.load(mixed + src[:, None] + hk * DK + offs_k[None, :], mask=qk_mask, other=0.0).to(tl.float32)
    k = tl.load(mixed + src[:, None] + QK + hk * DK + offs_k[None, :], mask=qk_mask, other=0.0).to(tl.float32)
    v_mask = r_ok[:, None] & mask_v[None, :]
    v = tl.load(mixed + src[:, None] + 2 * QK + hv * DV + offs_v[None, :], mask=v_mask, other=0.0).to(tl.float32)
    q = q / tl.sqrt(tl.sum(q * q, axis=1) + 1e-6)[:, None] * scale
    k = k / tl.sqrt(tl.sum(k * k, axis=1) + 1e-6)[:, None]
    a = tl.load(a_raw + n_safe * stride_ab + hv, mask=n_ok, other=0.0).to(tl.float32) + bias
    softplus = tl.where(a > 20.0, a, tl.log(1.0 + tl.exp(tl.minimum(a, 20.0))))
    # floored just past where e^x is 0 in float32 (e^-110 = 1.7e-48): an overflowing gate (-inf) would make
    # L_t - L_s = -inf + inf = NaN, and a deeper floor would cost the later rows' L_t - L_s their precision
    log_g = tl.where(r_ok, tl.maximum(decay * softplus, -110.0), 0.0)
    beta = 1.0 / (1.0 + tl.exp(-tl.load(b_raw + n_safe * stride_ab + hv, mask=n_ok, other=0.0).to(tl.float32)))
    return n_ok, n_safe, q, k, v, log_g, tl.where(r_ok, beta, 0.0)


@triton.jit
def _solve_chunk(k, beta, cum, rr, CH: tl.constexpr, PRECISION: tl.constexpr):
    """The chunk's decays ``M_ts = e^(L_t - L_s)`` (``s <= t``, else 0) and ``(I + diag(beta) A)^-1`` by forward
    substitution: row ``t`` is ``e_t`` plus the sum over ``s < t`` of ``X_ts`` times row ``s``."""
    rel = cum[:, None] - cum[None, :]  # L_t - L_s
    m_upto = tl.where(rr[:, None] >= rr[None, :], tl.exp(tl.minimum(rel, 0.0)), 0.0)
    kk = tl.dot(k, tl.trans(k), input_precision=PRECISION)
    x = -beta[:, None] * tl.where(rr[:, None] > rr[None, :], m_upto * kk, 0.0)
    inv = tl.where(rr[:, None] == rr[None, :], 1.0, 0.0)
    for t in range(1, CH):
        x_t = tl.sum(tl.where(rr[:, None] == t, x, 0.0), axis=0)
        row = tl.where(rr == t, 1.0, 0.0) + tl.sum(x_t[:, None] * inv, axis=0)
        inv = tl.where(rr[:, None] == t, row[None, :], inv)
    return m_upto, inv


@triton.jit
def _write_states_and_carry(
    h, k, u, cum, pool, rows, state_write, b, i, R, N, num_slots, head, tile, mask_h, rr,
    HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, CH: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """The state after each row of the chunk that writes one (its slot read by a scalar load), into that slot;
    the state after the chunk, returned."""
    for t in range(CH):
        t_ok = i + t < R
        n_t = tl.load(rows + b * R + i + t, mask=t_ok, other=-1)
        n_t_ok = t_ok & (n_t >= 0) & (n_t < N)
        ws = tl.load(state_write + tl.where(n_t_ok, n_t, 0), mask=n_t_ok, other=-1)
        if n_t_ok & (ws >= 0) & (ws < num_slots):
            cum_t = tl.sum(tl.where(rr == t, cum, 0.0), axis=0)
            coef = tl.where(rr <= t, tl.exp(tl.minimum(cum_t - cum, 0.0)), 0.0)  # e^(L_t - L_s), s <= t
            h_t = tl.exp(cum_t) * h + tl.dot(tl.trans(k * coef[:, None]), u, input_precision=PRECISION)
            tl.store(pool + ws.to(tl.int64) * HV * DK * DV + head + tile, h_t, mask=mask_h)
    last = tl.sum(tl.where(rr == CH - 1, cum, 0.0), axis=0)
    return tl.exp(last) * h + tl.dot(tl.trans(k * tl.exp(last - cum)[:, None]), u, input_precision=PRECISION)


def launch_inputs(a_raw, b_raw, key_dim: int, values_per_program: int, precision: str):
    """The chunked launches' common checks and inputs: the gates' raw inputs with one row stride (copied when
    they differ) and the key tile."""
    if values_per_program < 16 or values_per_program & (values_per_program - 1):
        raise ValueError(f"values_per_program must be a power of two of at least 16, not {values_per_program}")
    if precision not in ("ieee", "tf32x3"):
        raise ValueError(f"precision must be 'ieee' or 'tf32x3', not {precision!r}")
    if a_raw.stride(1) != 1 or b_raw.stride(1) != 1 or a_raw.stride(0) != b_raw.stride(0):
        a_raw, b_raw = a_raw.contiguous(), b_raw.contiguous()
    return a_raw, b_raw, max(16, triton.next_power_of_2(key_dim))
