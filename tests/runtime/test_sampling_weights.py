"""A row's filtered distribution as integer weights, checked against the definitions written as plain Python per
row (Python integers for the weights, brute force over tokens for top-p): ``row_weights`` and its probabilities
(``probs_of``, ``filtered_probs``), the inverse-CDF ``draw`` with exact integers, and ``residual_weights``."""

from __future__ import annotations

import math
import struct
from collections import Counter

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specgen.runtime.sampling import (
    FIXED_BITS,
    MAX_VOCAB,
    draw,
    filtered_probs,
    probs_of,
    residual_weights,
    row_weights,
)

NAN, INF = float("nan"), float("inf")
LN2 = 0.6931471824645996  # float32(log 2): at temperature 1 or 0.5, e is a power of two and top-p's sums are exact


def f32(x: float) -> float:
    """``x`` rounded to float32 (to nearest, ties to even; beyond the range: infinity), as a Python float."""
    try:
        return struct.unpack("f", struct.pack("f", x))[0]
    except OverflowError:
        return math.copysign(INF, x)


def cpu_exp(s: list[float], m: float) -> list[float]:
    """The CPU's ``e``: ``exp(s - m)`` in float64 (``math.exp``), rounded once to float32."""
    return [f32(math.exp(x - m)) for x in s]


def plain_weights(logits: list[float], t: float, k: int, p: float, exp=cpu_exp) -> list[int]:
    """One row's weights by the definitions (``logits`` float32 values, ``t`` and ``p`` float32 values)."""
    v = len(logits)
    if t <= 0:  # greedy: the argmax of the raw logits, a NaN the largest, the lowest index on ties
        nans = [i for i, x in enumerate(logits) if math.isnan(x)]
        best = nans[0] if nans else min(range(v), key=lambda i: (-logits[i], i))
        return [int(i == best) for i in range(v)]
    s = [f32(x / t) for x in logits]  # a float32 division (rounding the float64 quotient is exact rounding)
    valid = [i for i in range(v) if not math.isnan(s[i])]
    if not valid:
        return [0] * v
    m = max(s[i] for i in valid)
    kept = valid
    if 0 < k < len(valid):
        kth = sorted((s[i] for i in valid), reverse=True)[k - 1]
        kept = [i for i in valid if s[i] >= kth]
    e = dict(zip(kept, exp([s[i] for i in kept], m)))
    big = [math.floor((1.0 if s[i] == m else e[i]) * 2**FIXED_BITS) if i in e else 0 for i in range(v)]
    if p >= 1:
        return big
    z = float(sum(big))
    above = _above(big)
    return [w if w > 0 and float(a) < p * z else 0 for w, a in zip(big, above)]


def _above(big: list[int]) -> list[int]:
    """``S_x``: the sum of the weights strictly above each token's (per distinct weight, in descending order)."""
    counts, run, at = Counter(big), 0, {}
    for w in sorted(counts, reverse=True):
        at[w] = run
        run += w * counts[w]
    return [at[w] for w in big]


def plain_draw(weights: list[int], u: int) -> int:
    """The first token whose running sum exceeds ``floor(u * T / 2**24)`` (Python integers); 0 without mass."""
    target = u * sum(weights) // 2**24
    run = 0
    for i, w in enumerate(weights):
        run += w
        if run > target:
            return i
    return 0


def plain_residual(w: list[int], z: int, q: list[float]) -> list[int]:
    """``max(0, W_i - Q_i)``, ``Q_i = floor(min(q_i * Z, Z))`` in float64 (0 unless ``q_i > 0``); ``w`` without mass."""
    fz = float(z)
    big = [(int(fz) if qi * fz >= fz else math.floor(qi * fz)) if qi > 0 and z > 0 else 0 for qi in q]
    d = [max(wi - bi, 0) for wi, bi in zip(w, big)]
    return d if sum(d) > 0 else w


def plain_probs(w: list[int], z: int) -> list[float]:
    return [f32(float(x) / float(z)) if z > 0 else 0.0 for x in w]


def _bits_equal(got: torch.Tensor, want: torch.Tensor) -> bool:
    same = got.dtype == want.dtype and got.shape == want.shape
    return same and torch.equal(got.view(torch.int32), want.view(torch.int32))  # -0.0 included


def _check_rows(logits, t, k, p, exp=cpu_exp):
    f = row_weights(logits, t, k, p)
    assert f.weights.dtype == f.totals.dtype == torch.int64 and f.weights.shape == logits.shape
    got_w, got_z = f.weights.cpu().tolist(), f.totals.cpu().tolist()
    rows = logits.float().cpu().tolist()
    ts, ps = t.float().cpu().tolist(), p.float().cpu().tolist()
    for r, row in enumerate(rows):
        want = plain_weights(row, ts[r], int(k[r]), ps[r], exp)
        assert got_w[r] == want, (r, row, ts[r], int(k[r]), ps[r])
        assert got_z[r] == sum(want)
    probs = filtered_probs(logits, t, k, p)
    assert _bits_equal(probs, f.probs) and _bits_equal(f.probs, probs_of(f.weights, f.totals))
    want_probs = torch.tensor([plain_probs(w, z) for w, z in zip(got_w, got_z)], dtype=torch.float32)
    assert _bits_equal(probs.cpu(), want_probs.reshape(probs.shape))
    return f


@st.composite
def _filter_cases(draw):
    n, v = draw(st.integers(1, 6)), draw(st.integers(1, 12))
    span = draw(st.sampled_from([0, 1, 2, 5, 40]))  # span 0: every logit of a row tied
    scale = draw(st.sampled_from([1.0, 0.5, 1e-3, 30.0, 1e37, LN2]))  # 1e37: scaled logits overflow to infinity
    rows = [[draw(st.integers(-span, span)) * scale for _ in range(v)] for _ in range(n)]
    for row in rows:  # some -inf and NaN logits, at times a whole row of them
        for i in draw(st.lists(st.integers(0, v - 1), max_size=v, unique=True)):
            row[i] = draw(st.sampled_from([-INF, -INF, NAN, INF]))
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16]))
    temps = st.sampled_from([0.0, 0.7, 1.0, 0.5, 1.7, 1e-3, 3.0, -1.0, NAN])
    ks = st.one_of(st.sampled_from([0, 1, 2, v - 1, v, v + 1, 2**31 - 1]), st.integers(0, v + 2))
    # p * Z equal to a partial sum (scale LN2, p a multiple of 1/8): the boundary's strict inequality
    ps = st.one_of(st.sampled_from([1.0, 0.9, 0.5, 0.75, 0.25, 1e-7, 0.999999, NAN]), st.floats(1e-6, 1.0))
    t = torch.tensor([draw(temps) for _ in range(n)])
    k = torch.tensor([max(draw(ks), 0) for _ in range(n)], dtype=torch.int32)
    p = torch.tensor([draw(ps) for _ in range(n)])
    return torch.tensor(rows).to(dtype), t, k, p


@settings(max_examples=300, deadline=None)
@given(_filter_cases())
def test_row_weights_follow_the_definitions(case):
    """Ties at the top-k and top-p boundaries kept whole, NaN and -inf logits, k >= the non-NaN count, p = 1,
    NaN p and rows without mass: the weights, totals and probabilities of the plain definitions, bit for bit."""
    logits, t, k, p = case
    f = _check_rows(logits, t, k, p)
    w = f.weights.tolist()
    for r in range(len(w)):  # top-p by brute force over tokens: the kept weights are those of the rule
        if float(p[r]) < 1 and float(t[r]) > 0:
            full = plain_weights(logits[r].float().tolist(), float(t[r]), int(k[r]), 1.0)
            z = float(sum(full))
            keep = [e > 0 and float(sum(y for y in full if y > e)) < float(p[r]) * z for e in full]
            assert w[r] == [e if kx else 0 for e, kx in zip(full, keep)]


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_top_p_at_an_exact_boundary(data):
    """Weights that are powers of two (logits multiples of log 2) and p a multiple of 1/32: ``p * Z`` often equals a
    partial sum exactly, where the rule's strict ``S_x < p * Z`` decides."""
    n, v = data.draw(st.integers(1, 6)), data.draw(st.integers(2, 10))
    logits = torch.tensor([[-data.draw(st.integers(0, 5)) * LN2 for _ in range(v)] for _ in range(n)])
    t = torch.tensor([data.draw(st.sampled_from([1.0, 0.5])) for _ in range(n)])
    k = torch.tensor([data.draw(st.integers(0, v)) for _ in range(n)], dtype=torch.int32)
    p = torch.tensor([data.draw(st.integers(1, 31)) / 32 for _ in range(n)])
    _check_rows(logits, t, k, p)


def test_the_edge_rows():
    nan, inf = NAN, INF
    logits = torch.tensor(
        [
            [1.0, 3.0, 3.0, 0.0],  # greedy, a tie: the lowest index
            [5.0, nan, 5.0, nan],  # greedy: a NaN is the largest
            [nan, nan, nan, nan],  # sampled: no mass
            [-inf, -inf, -inf, -inf],  # sampled: every s equals the largest, e = 1 everywhere
            [2.0, 2.0, 1.0, -inf],  # top-p at 0.5: the tie group at the top kept whole
            [0.0, nan, -inf, 1.0],  # top-k 2 of 3 non-NaN; a NaN and a -inf weigh 0
            [1.0, 2.0, 3.0, 4.0],  # NaN top-p: nothing kept
            [1.0, 2.0, 3.0, 4.0],  # NaN temperature: every s is NaN
            [0.0, -LN2, -2 * LN2, -2 * LN2],  # e = 1, 1/2, 1/4, 1/4; p * Z = 1.5 * 2**40 = S of a 1/4: not kept
        ]
    )
    t = torch.tensor([0.0, -1.0, 1.0, 1.0, 1.0, 1.0, 1.0, nan, 1.0])
    k = torch.tensor([1, 0, 0, 0, 0, 2, 0, 0, 0], dtype=torch.int32)
    p = torch.tensor([0.1, 1.0, 1.0, 1.0, 0.5, 1.0, nan, 1.0, 0.75])
    w = _check_rows(logits, t, k, p).weights.tolist()
    one, e1 = 2**FIXED_BITS, math.floor(f32(math.exp(-1.0)) * 2**FIXED_BITS)
    assert w[:2] == [[0, 1, 0, 0], [0, 1, 0, 0]] and w[2] == [0] * 4 and w[3] == [one] * 4
    assert w[4] == [one, one, 0, 0] and w[5] == [e1, 0, 0, one] and w[6] == w[7] == [0] * 4
    assert w[8] == [one, one // 2, 0, 0]
    with pytest.raises(ValueError, match="vocabulary"):
        row_weights(torch.zeros(1, MAX_VOCAB + 1), torch.ones(1), torch.zeros(1, dtype=torch.int32), torch.ones(1))


def _device_exp(device):
    """The device's ``e``: ``exp(s - m)`` with float32 operands and torch's (CUDA's ``expf``) float32 exp."""

    def exp(s: list[float], m: float) -> list[float]:
        d = torch.tensor(s, dtype=torch.float32, device=device) - torch.tensor(m, dtype=torch.float32, device=device)
        return torch.exp(d).cpu().tolist()

    return exp


@pytest.mark.parametrize(
    "device",
    [
        "cpu",
        pytest.param(
            "cuda",
            marks=[
                pytest.mark.gpu,
                pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (run on the lent H200)"),
            ],
        ),
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_row_weights_on_a_full_vocabulary(dtype, device):
    """A Qwen-sized vocabulary with large tie groups: the plain definitions row by row, with the device's exp
    (float64 rounded once on the CPU, float32 ``expf`` on CUDA)."""
    g = torch.Generator().manual_seed(3)
    n, v = 8, 151936
    logits = (torch.randn(n, v, generator=g) * 3 * 8).round() / 8  # many exact ties
    logits[1] = logits[1].clamp(max=2.0)  # a large tie group at the top
    logits[2, ::3] = float("-inf")
    logits[4, 1::5] = float("nan")
    t = torch.tensor([0.7, 0.7, 1.0, 0.0, 0.7, 0.3, 2.0, 0.7])
    k = torch.tensor([0, 50, 1, 20, v, v + 5, 1000, 2], dtype=torch.int32)
    p = torch.tensor([0.9, 0.9, 1.0, 0.9, 1e-7, 0.5, 0.99, 1.0])
    args = (logits.to(dtype).to(device), t.to(device), k.to(device), p.to(device))
    f = _check_rows(*args, exp=cpu_exp if device == "cpu" else _device_exp(device))
    assert (f.totals[torch.tensor([0, 1, 2, 4, 5, 6, 7])] > 0).all() and f.totals[3] == 1


# --- the draw and the residual --------------------------------------------------------------------


@st.composite
def _weight_rows(draw, n_max=6):
    """Rows of int64 weights >= 0 whose totals reach from 0 to near 2**62 (where ``u * T`` leaves int64)."""
    n, v = draw(st.integers(1, n_max)), draw(st.integers(1, 12))
    tops = [0, 1, 3, 2**FIXED_BITS, 2**57 // v + 1, 2**62 // v]
    rows = []
    for _ in range(n):
        top = draw(st.sampled_from(tops))
        rows.append([draw(st.one_of(st.just(0), st.just(top), st.integers(0, top))) for _ in range(v)])
    return rows


U24 = st.one_of(st.sampled_from([0, 1, 2**23, 2**24 - 1]), st.integers(0, 2**24 - 1))


def _bits(us: list[int], low: list[int]) -> torch.Tensor:
    return torch.tensor([u << 8 | b for u, b in zip(us, low)], dtype=torch.int64)


@settings(max_examples=200, deadline=None)
@given(_weight_rows(), st.data())
def test_draw_is_the_exact_integer_inverse_cdf(rows, data):
    """``draw`` equals the Python loop over exact integers at random ``U`` and at every boundary ``U`` where the
    target reaches a running sum (``U * T >= C_i * 2**24``), for totals up to near 2**62."""
    n = len(rows)
    us = data.draw(st.lists(U24, min_size=n, max_size=n))
    low = data.draw(st.lists(st.integers(0, 255), min_size=n, max_size=n))  # the word's low 8 bits do not count
    w = torch.tensor(rows, dtype=torch.int64)
    got = draw(w, _bits(us, low))
    assert got.dtype == torch.int64 and got.tolist() == [plain_draw(r, u) for r, u in zip(rows, us)]
    for r, row in enumerate(rows):
        total, run = sum(row), 0
        if total == 0:
            continue
        assert row[plain_draw(row, us[r])] > 0  # a draw never lands on a token without mass
        for i, wi in enumerate(row[:-1]):
            run += wi
            edge = -(-run * 2**24 // total)  # the smallest U whose target reaches C_i
            for u in (edge - 1, edge):
                if 0 <= u < 2**24:
                    tok = int(draw(w[r : r + 1], _bits([u], [255]))[0])
                    assert tok == plain_draw(row, u) and (tok > i) == (u >= edge), (row, i, u)


def test_draw_edges():
    w = torch.tensor([[0, 0, 0], [0, 5, 0], [2**61, 2**61 - 1, 2**60], [1, 0, 1]])
    top = torch.full((4,), (2**24 - 1) << 8 | 255)
    assert draw(w, top).tolist() == [0, 1, 2, 2]  # no mass: token 0; u * T near 2**86 stays exact
    assert draw(w, torch.zeros(4, dtype=torch.int64)).tolist() == [0, 1, 0, 0]
    half = torch.full((4,), 2**23 << 8)
    assert draw(w, half).tolist() == [0, 1, 1, 2]  # target T / 2: [1, 0, 1] has running sums 1, 1, 2


FLOATS32 = st.one_of(
    st.sampled_from([0.0, -0.0, 1e-45, 1e-7, 0.25, 0.5, 1.0, 1.5, -0.5, NAN, INF, -INF]),
    st.floats(0, 1, width=32),
)


@settings(max_examples=200, deadline=None)
@given(_weight_rows(), st.data())
def test_residual_weights_follow_the_definition(rows, data):
    v = len(rows[0])
    q = [data.draw(st.lists(FLOATS32, min_size=v, max_size=v)) for _ in rows]
    w, z = torch.tensor(rows, dtype=torch.int64), torch.tensor([sum(r) for r in rows], dtype=torch.int64)
    got = residual_weights(w, z, torch.tensor(q, dtype=torch.float32))
    assert got.dtype == torch.int64
    assert got.tolist() == [plain_residual(r, sum(r), [f32(x) for x in qr]) for r, qr in zip(rows, q)]


def test_residual_edges():
    w = torch.tensor([[3, 1, 0, 4], [2, 2, 0, 0], [2**40, 2**40, 0, 0], [0, 0, 0, 0]])
    z = w.sum(dim=1)
    q = torch.tensor([[INF, 0.125, NAN, -1.0], [0.5, 0.5, 0.0, 0.0], [1e-45, 0.25, 0.5, 0.25], [INF, NAN, 1.0, 0.0]])
    got = residual_weights(w, z, q).tolist()
    assert got[0] == [0, 0, 0, 4]  # Q = Z at an infinite q; a NaN or negative q takes nothing
    assert got[1] == [2, 2, 0, 0]  # q = p: no residual mass, so p itself
    assert got[2] == [2**40, 2**40 - 2**39, 0, 0] and got[3] == [0, 0, 0, 0]
    assert got == [plain_residual(r, sum(r), qr) for r, qr in zip(w.tolist(), q.tolist())]


@settings(max_examples=100, deadline=None)
@given(_weight_rows())
def test_probs_are_the_float64_quotient_rounded_once(rows):
    w, z = torch.tensor(rows, dtype=torch.int64), torch.tensor([sum(r) for r in rows], dtype=torch.int64)
    want = torch.tensor([plain_probs(r, sum(r)) for r in rows], dtype=torch.float32)
    assert _bits_equal(probs_of(w, z), want)
