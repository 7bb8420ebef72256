"""Sampled verification's semantics: the counter-based generator, the per-request parameters, and the
statistics of the rule (the emitted token is distributed as the target's filtered distribution, the
acceptance rate is sum_x min(p(x), q(x))). The filtered distributions as integer weights, the draw and
the residual are checked in ``test_sampling_weights.py``, the rule against its plain per-row loops and
greedy verification in ``test_sampling_rejection.py``.

Statistical checks use a fixed seed, so they are deterministic; their thresholds are those a
correct implementation fails with probability about 1e-4 per check (chi-square p-value > 1e-4,
and 4 standard errors for a rate).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from specgen.runtime.philox import _words, philox4x32, philox_bits, philox_uniform
from specgen.runtime.sampling import Filtered, SamplingParams, SamplingTensors, rejection_verify, row_weights

sys.path.insert(0, str(Path(__file__).parent))
from test_sampling_rejection import family  # noqa: E402 - the vocabulary pass, then spec_rejection_verify

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
    f = row_weights(logits[None], torch.tensor([temperature]), torch.tensor([top_k]), torch.tensor([top_p]))
    p, exact = f.probs[0], f.weights[0].double() / f.totals[0].double()  # exact: the weights' distribution
    if draft == "good":  # close to the target, with mass on every token
        q = torch.softmax(logits / temperature + 0.3 * torch.randn(V, generator=g), 0)
    elif draft == "bad":  # far from it: the reversed preference
        q = torch.softmax(-logits / temperature, 0)
    else:  # a greedy draft: the one-hot of its own choice (the target's second best)
        q = torch.zeros(V).scatter_(0, torch.argsort(p, descending=True)[1:2], 1.0)
    x = torch.multinomial(q, N, replacement=True, generator=g)
    target = Filtered(f.weights.expand(N, 2, V), f.totals.expand(N, 2))
    seeds = torch.arange(N) * 7919 + len(setting) * 100 + len(draft)
    pos = torch.randint(0, 2**31, (N,), generator=g)
    acc, emitted = rejection_verify(
        x[:, None], q[x][:, None], None if draft == "greedy" else q.expand(N, 1, V), target, seeds, pos
    )

    counts = torch.bincount(emitted[:, 0].long(), minlength=V)
    kept = f.weights[0] > 0
    assert counts[~kept].sum() == 0  # nothing the filters removed is ever emitted
    pvalue = chi2_pvalue(counts[kept], N * exact[kept])
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
    f = row_weights(logits, t, k, pp)  # [2, V]
    p, exact = f.probs, f.weights.double() / f.totals.double()[:, None]
    sign = 1.0 if draft == "good" else -1.0  # good: close to the target; bad: its reversed preference
    q = torch.softmax(sign * logits / temperature + 0.3 * torch.randn(2, V16, generator=g), 1)
    x = torch.stack([torch.multinomial(q[j], N, replacement=True, generator=g) for j in range(2)], 1)
    bonus = row_weights(torch.randn(1, V16, generator=g), t[:1], k[:1], pp[:1])
    target = Filtered(
        torch.cat([f.weights, bonus.weights]).expand(N, 3, V16), torch.cat([f.totals, bonus.totals]).expand(N, 3)
    )
    seeds = torch.arange(N) * 104729 + 17 * len(setting) + len(draft)
    pos = torch.randint(0, 2**40, (N,), generator=g)
    dists = q.expand(N, 2, V16)
    acc, nxt = family(x, q.gather(1, x.T).T, dists, target, seeds, pos, torch.full((N,), temperature))
    for j, rows in ((0, torch.ones(N, dtype=torch.bool)), (1, acc >= 1)):
        counts = torch.bincount(nxt[rows, j].long(), minlength=V16)
        kept = f.weights[j] > 0
        assert counts[~kept].sum() == 0
        pvalue = chi2_pvalue(counts[kept], rows.sum() * exact[j][kept])
        assert pvalue > P_MIN, (setting, draft, j, counts.tolist())
    theory = float(torch.minimum(p[0], q[0]).double().sum())
    rate = float((acc >= 1).double().mean())
    assert abs(rate - theory) <= 4 * math.sqrt(theory * (1 - theory) / N) + 1e-9, (rate, theory)
