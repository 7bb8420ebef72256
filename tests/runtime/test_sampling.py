"""Sampled verification's semantics: the counter-based generator, the filtered target distributions,
rejection sampling against its host reference and against greedy verification, and the statistics
of the rule (the emitted token is distributed as the target's filtered distribution, the acceptance
rate is sum_x min(p(x), q(x))).

Statistical checks use a fixed seed, so they are deterministic; their thresholds are those a
correct implementation fails with probability about 1e-4 per check (chi-square p-value > 1e-4,
and 4 standard errors for a rate).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specgen.runtime.philox import _words, philox4x32, philox_bits, philox_uniform
from specgen.runtime.sampling import (
    SamplingParams,
    SamplingTensors,
    filtered_probs,
    reference_rejection_verify,
    rejection_inputs,
    rejection_verify,
)
from specgen.runtime.semantics import greedy_prefix_verify, spec_rejection_verify

P_MIN = 1e-4  # the smallest chi-square p-value a check accepts


def chi2_sf(x: float, df: int) -> float:
    """The chi-square survival function P(X > x) for an integer ``df``, in closed form (no scipy)."""
    if df % 2 == 0:
        term = total = math.exp(-x / 2)
        for i in range(1, df // 2):
            term *= x / (2 * i)
            total += term
        return total
    total = math.erfc(math.sqrt(x / 2))
    term = math.sqrt(2 * x / math.pi) * math.exp(-x / 2)
    for i in range(1, (df - 1) // 2 + 1):
        total += term
        term *= x / (2 * i + 1)
    return total


def chi2_pvalue(counts: torch.Tensor, expected: torch.Tensor) -> float:
    stat = float(((counts.double() - expected) ** 2 / expected).sum())
    return chi2_sf(stat, counts.numel() - 1)


def test_chi2_sf_matches_tabulated_quantiles():
    for x, df in ((3.841, 1), (5.991, 2), (11.070, 5), (18.307, 10), (293.25, 255)):
        assert chi2_sf(x, df) == pytest.approx(0.05, abs=1e-3), (x, df)
    assert chi2_sf(0.0, 4) == pytest.approx(1.0)


# --- the generator --------------------------------------------------------------------------------


def test_philox_matches_the_random123_known_answers():
    cases = [
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        (
            (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
            (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
        ),
    ]
    for counter, key, want in cases:
        got = philox4x32(tuple(torch.tensor(c) for c in counter), tuple(torch.tensor(k) for k in key))
        assert tuple(int(w) for w in got) == want


def test_uniforms_are_a_pure_function_of_the_keys():
    seeds = torch.tensor([0, 1, -1, 2**62, -(2**63), 2**63 - 1])
    pos = torch.tensor([0, 5, 2**31, 2**40, 7, 3])
    a = philox_uniform(seeds, pos, 1)
    assert a.dtype == torch.float32 and ((a >= 0) & (a < 1)).all()
    assert torch.equal(a, philox_uniform(seeds, pos, torch.ones(6, dtype=torch.int32)))  # dtypes do not matter
    assert torch.equal(a[2:3], philox_uniform(-1, 2**31, 1).reshape(1))  # nor does the batch
    assert torch.equal(a.flip(0), philox_uniform(seeds.flip(0), pos.flip(0), 1))  # nor the order
    assert torch.equal(a * 2**24, torch.floor(a * 2**24))  # multiples of 2**-24: exact on any device
    assert len(set(philox_uniform(seeds, pos, 0).tolist()) | set(a.tolist())) == 12


def test_uniformity_chi_square():
    n, bins = 4 * 10**5, 256
    for seed, pos, stream in (
        (12345, torch.arange(n), 0),  # consecutive positions
        (torch.arange(n), 7, 1),  # consecutive seeds
        (3, 11, torch.arange(n)),  # consecutive streams
    ):
        u = philox_uniform(seed, pos, stream)
        counts = torch.bincount((u * bins).long(), minlength=bins)
        p = chi2_pvalue(counts, torch.full((bins,), n / bins, dtype=torch.float64))
        assert p > P_MIN, p


def test_neighbouring_counters_are_independent():
    n, bins = 4 * 10**5, 16
    i = torch.arange(n)
    seeds = 1000003 * i  # seeds spread out, positions consecutive
    base = philox_uniform(seeds, i, 0)
    for other in (philox_uniform(seeds, i + 1, 0), philox_uniform(seeds, i, 1), philox_uniform(seeds + 1, i, 0)):
        # the pairs fill a bins x bins grid evenly, and the correlation is within 5 standard errors of 0
        cell = (base * bins).long() * bins + (other * bins).long()
        counts = torch.bincount(cell, minlength=bins * bins)
        assert chi2_pvalue(counts, torch.full((bins * bins,), n / bins**2, dtype=torch.float64)) > P_MIN
        corr = torch.corrcoef(torch.stack([base, other]).double())[0, 1]
        assert abs(float(corr)) < 5 / math.sqrt(n)
    assert philox_bits(1, 2, 3).dtype == torch.int64


def _reference_philox_bits(seed, position, stream):
    """``philox_bits`` as first written: ``philox4x32`` on the broadcast words, one op per word and step."""
    device = next((x.device for x in (position, seed, stream) if isinstance(x, torch.Tensor)), torch.device("cpu"))
    s_lo, s_hi = _words(seed, device)
    p_lo, p_hi = _words(position, device)
    st_, _ = _words(stream, device)
    p_lo, p_hi, st_, s_lo, s_hi = torch.broadcast_tensors(p_lo, p_hi, st_, s_lo, s_hi)
    return philox4x32((p_lo, p_hi, st_, torch.zeros_like(st_)), (s_lo, s_hi))[0]


def test_philox_bits_equal_the_plain_rounds_bit_for_bit():
    g = torch.Generator().manual_seed(7)
    i64 = torch.iinfo(torch.int64)
    edges = [0, 1, -1, 2**31 - 1, 2**31, 2**32 - 1, 2**32, i64.max, i64.min]
    seeds = torch.cat([torch.tensor(edges), torch.randint(i64.min, i64.max, (500,), generator=g)])
    positions = torch.cat(
        [
            torch.tensor(edges),
            torch.randint(0, 2**31 + 1, (60,), generator=g),
            torch.randint(i64.min, i64.max, (60,), generator=g),
        ]
    )
    streams = torch.tensor([0, 1, 2, 3, -1, 2**32 + 2])
    for stream in (0, 1, 2, 7, 2**32 + 1, streams[:, None, None], streams[:2, None, None].int()):
        want = _reference_philox_bits(seeds[:, None], positions, stream)
        got = philox_bits(seeds[:, None], positions, stream)
        assert got.dtype == torch.int64 and got.shape == want.shape and torch.equal(got, want), stream
    for seed, pos, stream in ((0, 0, 0), (-1, 2**31, 1), (i64.max, 5, torch.tensor(2)), (torch.tensor([3, 4]), 9, 1)):
        want, got = _reference_philox_bits(seed, pos, stream), philox_bits(seed, pos, stream)
        assert got.shape == want.shape and torch.equal(got, want)


# --- parameters -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(temperature=-0.1), "temperature"),
        (dict(temperature=float("nan")), "temperature"),
        (dict(top_k=-1), "top_k"),
        (dict(top_k=2.0), "top_k"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(seed=2**63), "seed"),
        (dict(seed=True), "seed"),
    ],
)
def test_sampling_params_are_validated_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message) as err:
        SamplingParams(**kwargs)
    assert "\n" not in str(err.value)


def test_sampling_tensors_are_written_in_place():
    bufs = SamplingTensors.empty(4)
    ptrs = [t.data_ptr() for t in (bufs.temperature, bufs.top_k, bufs.top_p, bufs.seed)]
    bufs.fill([SamplingParams(0.7, 4, 0.9, -5), SamplingParams(1.0, 0, 1.0, 2**63 - 1)])
    assert [t.data_ptr() for t in (bufs.temperature, bufs.top_k, bufs.top_p, bufs.seed)] == ptrs
    assert (bufs.temperature.dtype, bufs.top_k.dtype, bufs.top_p.dtype, bufs.seed.dtype) == (
        torch.float32,
        torch.int32,
        torch.float32,
        torch.int64,
    )
    assert bufs.temperature.tolist() == pytest.approx([0.7, 1.0, 0.0, 0.0])
    assert bufs.top_k.tolist() == [4, 0, 0, 0] and bufs.seed.tolist() == [-5, 2**63 - 1, 0, 0]
    assert bufs.top_p.tolist() == pytest.approx([0.9, 1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="do not fit"):
        bufs.fill([SamplingParams()] * 5)
    assert SamplingTensors.of([SamplingParams(seed=3)]).seed.tolist() == [3]


# --- filtered distributions -----------------------------------------------------------------------


def _brute_filter(logits, t, k, p):
    """One row by the definitions, with Python sets."""
    v = len(logits)
    if t == 0:
        best = max(logits)
        return [1.0 if i == logits.index(best) else 0.0 for i in range(v)]
    scaled = [x / t for x in logits]
    kept = set(range(v))
    if 0 < k < v:
        kth = sorted(scaled, reverse=True)[k - 1]
        kept = {i for i in kept if scaled[i] >= kth}
    z = sum(math.exp(scaled[i]) for i in kept)
    probs = [math.exp(scaled[i]) / z if i in kept else 0.0 for i in range(v)]
    if p < 1:
        kept = {i for i in kept if sum(q for q in probs if q > probs[i]) < p}
    z = sum(probs[i] for i in kept)
    return [probs[i] / z if i in kept else 0.0 for i in range(v)]


def test_filtered_probs_follow_the_definitions():
    g = torch.Generator().manual_seed(1)
    n, v = 400, 10
    logits = torch.randint(-3, 4, (n, v), generator=g).float() / 2  # many ties
    t = torch.tensor([0.0, 0.5, 1.0, 1.7])[torch.randint(0, 4, (n,), generator=g)]
    k = torch.randint(0, 12, (n,), generator=g, dtype=torch.int32)
    p = torch.tensor([1.0, 0.9, 0.5, 0.05])[torch.randint(0, 4, (n,), generator=g)]
    got = filtered_probs(logits, t, k, p)
    assert got.dtype == torch.float32 and torch.allclose(got.sum(1), torch.ones(n))
    for row in range(n):
        want = _brute_filter(logits[row].tolist(), float(t[row]), int(k[row]), float(p[row]))
        assert got[row].tolist() == pytest.approx(want, abs=1e-5), row


def _reference_filtered_probs(logits, temperature, top_k, top_p):
    """``filtered_probs`` as first written: a sort for top-k, another of the probabilities and a search for top-p."""
    n, v = logits.shape
    x = logits.float()
    t = temperature.to(x.device, torch.float32)
    greedy = t <= 0
    scaled = x / torch.where(greedy, torch.ones_like(t), t)[:, None]
    k = top_k.to(x.device).long()
    k = torch.where((k <= 0) | (k >= v), torch.full_like(k, v), k)
    kth = torch.gather(torch.sort(scaled, dim=1, descending=True).values, 1, (k - 1)[:, None])
    scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=1)
    desc = torch.sort(probs, dim=1, descending=True).values
    mass = torch.cat([torch.zeros_like(desc[:, :1]), torch.cumsum(desc, dim=1)], dim=1)
    above = torch.searchsorted(-desc, -probs, right=False)
    p = top_p.to(x.device, torch.float32)[:, None]
    keep = (torch.gather(mass, 1, above) < p) | (p >= 1)
    probs = torch.where(keep, probs, torch.zeros_like(probs))
    probs = probs / probs.sum(dim=1, keepdim=True)
    onehot = torch.zeros_like(probs).scatter_(1, torch.argmax(x, dim=1, keepdim=True), 1.0)
    return torch.where(greedy[:, None], onehot, probs)


def _assert_bits_equal(got, want):
    assert got.dtype == want.dtype == torch.float32 and got.shape == want.shape
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))  # -0.0 and NaN payloads included


@st.composite
def _filter_cases(draw):
    n, v = draw(st.integers(1, 6)), draw(st.integers(1, 12))
    span = draw(st.sampled_from([0, 1, 2, 5, 40]))  # span 0: every logit of a row tied
    scale = draw(st.sampled_from([1.0, 0.5, 1e-3, 30.0]))
    rows = [[draw(st.integers(-span, span)) * scale for _ in range(v)] for _ in range(n)]
    for row in rows:  # some -inf logits, never a whole row
        for i in draw(st.lists(st.integers(0, v - 1), max_size=v - 1, unique=True)):
            row[i] = float("-inf")
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16]))
    temps = st.sampled_from([0.0, 0.7, 1.0, 0.5, 1.7, 1e-3, 3.0])
    ks = st.one_of(st.sampled_from([0, 1, 2, v - 1, v, v + 1, 2**31 - 1]), st.integers(0, v + 2))
    ps = st.one_of(st.sampled_from([1.0, 0.9, 0.5, 1e-7, 0.999999]), st.floats(1e-6, 1.0))
    t = torch.tensor([draw(temps) for _ in range(n)])
    k = torch.tensor([max(draw(ks), 0) for _ in range(n)], dtype=torch.int32)
    p = torch.tensor([draw(ps) for _ in range(n)])
    return torch.tensor(rows).to(dtype), t, k, p


@settings(max_examples=400, deadline=None)
@given(_filter_cases())
def test_filtered_probs_equal_the_two_sort_version_bit_for_bit(case):
    _assert_bits_equal(filtered_probs(*case), _reference_filtered_probs(*case))


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
def test_filtered_probs_equal_the_two_sort_version_on_a_full_vocabulary(dtype, device):
    """One sort equals two on the device too: it relies on the device's softmax being monotone (exp)."""
    g = torch.Generator().manual_seed(3)
    n, v = 8, 151936
    logits = (torch.randn(n, v, generator=g) * 3 * 8).round() / 8  # many exact ties
    logits[1] = logits[1].clamp(max=2.0)  # a large tie group at the top
    logits[2, ::3] = float("-inf")
    t = torch.tensor([0.7, 0.7, 1.0, 0.0, 0.7, 0.3, 2.0, 0.7])
    k = torch.tensor([0, 50, 1, 20, v, v + 5, 1000, 2], dtype=torch.int32)
    p = torch.tensor([0.9, 0.9, 1.0, 0.9, 1e-7, 0.5, 0.99, 1.0])
    args = (logits.to(dtype).to(device), t.to(device), k.to(device), p.to(device))
    _assert_bits_equal(filtered_probs(*args), _reference_filtered_probs(*args))


def test_rejection_inputs_uniforms_are_the_per_stream_keys():
    g = torch.Generator().manual_seed(5)
    batch, width, vocab = 3, 4, 16
    target = torch.softmax(torch.randn(batch, width, vocab, generator=g), dim=-1)
    drafts = torch.randint(0, vocab, (batch, width - 1), generator=g)
    seeds, pos = torch.tensor([0, -1, 2**63 - 1]), torch.tensor([0, 2**31, 17])
    _, _, u = rejection_inputs(drafts, torch.full((batch, width - 1), 0.5), None, target, seeds, pos)
    j = torch.arange(width - 1)
    assert torch.equal(u, philox_uniform(seeds[:, None], pos[:, None] + j, 0))


def test_greedy_rows_are_the_argmax_one_hot_lowest_index_on_ties():
    logits = torch.tensor([[1.0, 3.0, 3.0, 0.0], [5.0, 5.0, 5.0, 5.0]])
    out = filtered_probs(logits, torch.zeros(2), torch.tensor([1, 0]), torch.tensor([0.1, 1.0]))
    assert out.tolist() == [[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]


# --- rejection verification -----------------------------------------------------------------------


def _random_case(g, batch, width, vocab, greedy_share=0.25):
    rows = batch * width
    logits = torch.randn(rows, vocab, generator=g) * 2
    t = torch.rand(rows, generator=g) * 1.5
    t[torch.rand(rows, generator=g) < greedy_share] = 0
    k = torch.randint(0, vocab, (rows,), generator=g, dtype=torch.int32)
    p = 0.2 + 0.8 * torch.rand(rows, generator=g)
    target = filtered_probs(logits, t, k, p).reshape(batch, width, vocab)
    q = torch.softmax(torch.randn(batch, width - 1, vocab, generator=g) * 2, -1)
    x = torch.multinomial(q.reshape(-1, vocab), 1, generator=g).reshape(batch, width - 1)
    agree = torch.rand(x.shape, generator=g) < 0.3  # some drafts are the target's favourite
    x = torch.where(agree, torch.argmax(target[:, :-1], -1), x)
    qx = torch.gather(q, 2, x[..., None])[..., 0]
    seeds = torch.randint(-(2**63), 2**63 - 1, (batch,), generator=g)
    pos = torch.randint(0, 2**40, (batch,), generator=g)
    return x, qx, q, target, seeds, pos


@pytest.mark.parametrize("width", [2, 4, 7])
@pytest.mark.parametrize("dists", [True, False])
def test_rejection_verify_equals_the_host_reference(width, dists):
    g = torch.Generator().manual_seed(10 * width + dists)
    x, qx, q, target, seeds, pos = _random_case(g, 300, width, 16)
    if not dists:
        q, qx = None, torch.where(torch.rand(qx.shape, generator=g) < 0.8, torch.ones_like(qx), qx)
    x[::17, 0] = torch.tensor([-1, 16, 2**31 - 1])[torch.arange(x[::17].shape[0]) % 3]  # outside the vocabulary
    acc, emitted = rejection_verify(x, qx, q, target, seeds, pos)
    ref_acc, ref_emitted = reference_rejection_verify(x, qx, q, target, seeds, pos)
    assert acc.dtype == emitted.dtype == torch.int32
    assert torch.equal(acc, ref_acc) and torch.equal(emitted, ref_emitted)
    assert 0 < acc.float().mean() < width - 1  # both accepting and rejecting happen
    row = torch.arange(width)[None, :]
    assert ((emitted >= 0) == (row <= acc[:, None].long())).all()
    assert (emitted[:, :-1][row[:, :-1] < acc[:, None]] == x[row[:, :-1] < acc[:, None]]).all()


@pytest.mark.parametrize("width", [2, 5])
def test_temperature_zero_reproduces_greedy_prefix_verify(width):
    g = torch.Generator().manual_seed(width)
    batch, vocab = 500, 6
    logits = torch.randint(0, 3, (batch * width, vocab), generator=g).float()  # ties: lowest index wins
    zeros = torch.zeros(batch * width)
    target = filtered_probs(logits, zeros, zeros.int(), zeros + 1).reshape(batch, width, vocab)
    target_tokens = torch.argmax(logits, -1).reshape(batch, width).int()
    drafts = target_tokens[:, :-1].clone()
    wrong = torch.rand(drafts.shape, generator=g) < 0.3
    drafts[wrong] = torch.randint(0, vocab, (int(wrong.sum()),), generator=g, dtype=torch.int32)
    seeds, pos = torch.randint(0, 2**62, (batch,), generator=g), torch.randint(0, 2**31, (batch,), generator=g)
    want_acc, want_next = torch.zeros(batch, dtype=torch.int32), torch.zeros(batch, width, dtype=torch.int32)
    greedy_prefix_verify(drafts, target_tokens, want_acc, want_next)
    ones = torch.ones(batch, width - 1)
    for dists in (None, torch.nn.functional.one_hot(drafts.long(), vocab).float()):
        acc, emitted = rejection_verify(drafts, ones, dists, target, seeds, pos)
        assert torch.equal(acc, want_acc) and torch.equal(emitted, want_next)


def _family(draft_tokens, draft_probs, draft_dists, target, seeds, pos, temperature):
    """The kernel family on the inputs ``rejection_inputs`` gives: ``(accepted, next_tokens)``."""
    batch, width = target.shape[:2]
    tokens, p_at, u = rejection_inputs(draft_tokens, draft_probs, draft_dists, target, seeds, pos)
    assert tokens.dtype == torch.int32 and p_at.dtype == u.dtype == torch.float32
    acc, nxt = torch.full((batch,), -777, dtype=torch.int32), torch.full((batch, width), -777, dtype=torch.int32)
    spec_rejection_verify(draft_tokens.int(), tokens, draft_probs.float(), p_at, u, temperature, acc, nxt)
    return acc, nxt


@pytest.mark.parametrize("width", [2, 4, 7])
@pytest.mark.parametrize("dists", [True, False])
def test_the_kernel_family_on_rejection_inputs_is_rejection_verify(width, dists):
    """A mixed batch (a quarter of the sequences greedy) through the split the generated family uses:
    the vocabulary pass (``rejection_inputs``), then ``spec_rejection_verify``: token for token the rule."""
    g = torch.Generator().manual_seed(100 * width + dists)
    batch, vocab = 400, 16
    logits = torch.randn(batch, width, vocab, generator=g) * 2
    t = torch.rand(batch, generator=g) * 1.5 + 0.05
    t[torch.rand(batch, generator=g) < 0.25] = 0
    k = torch.randint(0, vocab, (batch,), generator=g, dtype=torch.int32)
    top_p = 0.2 + 0.8 * torch.rand(batch, generator=g)
    rows = lambda x: x.repeat_interleave(width)  # noqa: E731 - a sequence's parameters on each of its rows
    target = filtered_probs(logits.reshape(-1, vocab), rows(t), rows(k), rows(top_p)).reshape(batch, width, vocab)
    q = torch.softmax(torch.randn(batch, width - 1, vocab, generator=g) * 2, -1)
    x = torch.multinomial(q.reshape(-1, vocab), 1, generator=g).reshape(batch, width - 1)
    x = torch.where(torch.rand(x.shape, generator=g) < 0.4, torch.argmax(target[:, :-1], -1), x)
    qx = torch.gather(q, 2, x[..., None])[..., 0]
    if not dists:  # a greedy draft: one-hot at x with its q(x), mostly 1
        q, qx = None, torch.where(torch.rand(qx.shape, generator=g) < 0.8, torch.ones_like(qx), qx)
    x[::23, 0] = torch.tensor([-1, vocab])[torch.arange(x[::23].shape[0]) % 2]  # outside the vocabulary
    seeds = torch.randint(-(2**63), 2**63 - 1, (batch,), generator=g)
    pos = torch.randint(0, 2**40, (batch,), generator=g)
    want_acc, want_next = rejection_verify(x, qx, q, target, seeds, pos)
    acc, nxt = _family(x, qx, q, target, seeds, pos, t)
    assert torch.equal(acc, want_acc) and torch.equal(nxt, want_next)
    assert 0 < acc.float().mean() < width - 1 and (acc[t > 0] < width - 1).any()


@pytest.mark.parametrize("width", [2, 5])
def test_the_kernel_family_at_temperature_zero_is_greedy_prefix_verify(width):
    g = torch.Generator().manual_seed(7 + width)
    batch, vocab = 500, 6
    logits = torch.randint(0, 3, (batch * width, vocab), generator=g).float()
    zeros = torch.zeros(batch * width)
    target = filtered_probs(logits, zeros, zeros.int(), zeros + 1).reshape(batch, width, vocab)
    target_tokens = torch.argmax(logits, -1).reshape(batch, width).int()
    drafts = target_tokens[:, :-1].clone()
    wrong = torch.rand(drafts.shape, generator=g) < 0.3
    drafts[wrong] = torch.randint(0, vocab, (int(wrong.sum()),), generator=g, dtype=torch.int32)
    seeds, pos = torch.randint(0, 2**62, (batch,), generator=g), torch.randint(0, 2**31, (batch,), generator=g)
    want_acc, want_next = torch.zeros(batch, dtype=torch.int32), torch.zeros(batch, width, dtype=torch.int32)
    greedy_prefix_verify(drafts, target_tokens, want_acc, want_next)
    ones = torch.ones(batch, width - 1)
    acc, nxt = _family(drafts, ones, None, target, seeds, pos, torch.zeros(batch))
    assert torch.equal(acc, want_acc) and torch.equal(nxt, want_next)


# --- statistics -----------------------------------------------------------------------------------

N = 10**5
V = 8
SETTINGS = {"t0.7": (0.7, 0, 1.0), "t1.0": (1.0, 0, 1.0), "top_p0.9": (1.0, 0, 0.9), "top_k4": (1.0, 4, 1.0)}


@pytest.mark.parametrize("draft", ["good", "bad", "greedy"])
@pytest.mark.parametrize("setting", list(SETTINGS))
def test_first_emitted_token_follows_the_target_and_acceptance_matches_theory(setting, draft):
    temperature, top_k, top_p = SETTINGS[setting]
    g = torch.Generator().manual_seed(2024)
    logits = torch.randn(V, generator=g) * 1.5
    p = filtered_probs(logits[None], torch.tensor([temperature]), torch.tensor([top_k]), torch.tensor([top_p]))[0]
    if draft == "good":  # close to the target, with mass on every token
        q = torch.softmax(logits / temperature + 0.3 * torch.randn(V, generator=g), 0)
    elif draft == "bad":  # far from it: the reversed preference
        q = torch.softmax(-logits / temperature, 0)
    else:  # a greedy draft: the one-hot of its own choice (the target's second best)
        q = torch.zeros(V).scatter_(0, torch.argsort(p, descending=True)[1:2], 1.0)
    x = torch.multinomial(q, N, replacement=True, generator=g)
    target = p.expand(N, 2, V)
    seeds = torch.arange(N) * 7919 + len(setting) * 100 + len(draft)
    pos = torch.randint(0, 2**31, (N,), generator=g)
    acc, emitted = rejection_verify(
        x[:, None], q[x][:, None], None if draft == "greedy" else q.expand(N, 1, V), target, seeds, pos
    )

    counts = torch.bincount(emitted[:, 0].long(), minlength=V)
    kept = p > 0
    assert counts[~kept].sum() == 0  # nothing the filters removed is ever emitted
    pvalue = chi2_pvalue(counts[kept], N * p[kept].double())
    assert pvalue > P_MIN, (setting, draft, counts.tolist(), (N * p).tolist())

    theory = float(torch.minimum(p, q).double().sum())
    rate = float((acc >= 1).double().mean())
    stderr = math.sqrt(max(theory * (1 - theory), 1e-12) / N)
    assert abs(rate - theory) <= 4 * stderr + 1e-9, (rate, theory)


V16 = 16
SETTINGS16 = {"t0.7": (0.7, 0, 1.0), "t1.0": (1.0, 0, 1.0), "top_p0.9": (1.0, 0, 0.9), "top_k8": (1.0, 8, 1.0)}


@pytest.mark.parametrize("draft", ["good", "bad"])
@pytest.mark.parametrize("setting", list(SETTINGS16))
def test_the_graph_path_is_lossless_at_every_position(setting, draft):
    """What the engines' graphs run (the vocabulary pass ``rejection_inputs``, then the family
    ``spec_rejection_verify``) with drafts sampled from ``q`` over two draft positions, V = 16, 10^5 rows
    per setting: the tokens emitted at index 0 and, given a first accepted draft, at index 1 each follow
    the target's filtered distribution (chi-square p-value > 1e-4; nothing filtered out is emitted), and
    the first draft's acceptance rate is ``sum_x min(p(x), q(x))`` within 4 standard errors."""
    temperature, top_k, top_p = SETTINGS16[setting]
    g = torch.Generator().manual_seed(77 + len(setting) + 10 * len(draft))
    logits = torch.randn(2, V16, generator=g) * 1.5  # a different target at each position
    t, k, pp = torch.tensor([temperature] * 2), torch.tensor([top_k] * 2), torch.tensor([top_p] * 2)
    p = filtered_probs(logits, t, k, pp)  # [2, V]
    sign = 1.0 if draft == "good" else -1.0  # good: close to the target; bad: its reversed preference
    q = torch.softmax(sign * logits / temperature + 0.3 * torch.randn(2, V16, generator=g), 1)
    x = torch.stack([torch.multinomial(q[j], N, replacement=True, generator=g) for j in range(2)], 1)
    bonus = filtered_probs(torch.randn(1, V16, generator=g), t[:1], k[:1], pp[:1])
    target = torch.cat([p, bonus]).expand(N, 3, V16)
    seeds = torch.arange(N) * 104729 + 17 * len(setting) + len(draft)
    pos = torch.randint(0, 2**40, (N,), generator=g)
    dists = q.expand(N, 2, V16)
    acc, nxt = _family(x, q.gather(1, x.T).T, dists, target, seeds, pos, torch.full((N,), temperature))
    for j, rows in ((0, torch.ones(N, dtype=torch.bool)), (1, acc >= 1)):
        counts = torch.bincount(nxt[rows, j].long(), minlength=V16)
        kept = p[j] > 0
        assert counts[~kept].sum() == 0
        pvalue = chi2_pvalue(counts[kept], rows.sum() * p[j][kept].double())
        assert pvalue > P_MIN, (setting, draft, j, counts.tolist())
    theory = float(torch.minimum(p[0], q[0]).double().sum())
    rate = float((acc >= 1).double().mean())
    assert abs(rate - theory) <= 4 * math.sqrt(theory * (1 - theory) / N) + 1e-9, (rate, theory)
