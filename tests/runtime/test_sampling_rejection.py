"""Speculative rejection sampling over integer weights: ``rejection_verify`` against its plain per-row loops
(``oracles.sampled_reference.reference_rejection_verify``: Python integers for the residual and the draw) and, at
temperature 0, against greedy verification; and the split the generated family runs (the vocabulary pass
``rejection_inputs``, then ``spec_rejection_verify``), token for token the rule, on mixed batches."""

from __future__ import annotations

import pytest
import torch
from oracles.sampled_reference import reference_rejection_verify

from specgen.runtime.philox import philox_uniform
from specgen.runtime.sampling import Filtered, rejection_inputs, rejection_verify, row_weights
from specgen.runtime.semantics import greedy_prefix_verify, spec_rejection_verify


def family(draft_tokens, draft_probs, draft_dists, target: Filtered, seeds, pos, temperature):
    """The kernel family on the inputs ``rejection_inputs`` gives: ``(accepted, next_tokens)``."""
    batch, width = target.weights.shape[:2]
    tokens, p_at, u = rejection_inputs(draft_tokens, draft_probs, draft_dists, target, seeds, pos)
    assert tokens.dtype == torch.int32 and p_at.dtype == u.dtype == torch.float32
    acc, nxt = torch.full((batch,), -777, dtype=torch.int32), torch.full((batch, width), -777, dtype=torch.int32)
    spec_rejection_verify(draft_tokens.int(), tokens, draft_probs.float(), p_at, u, temperature, acc, nxt)
    return acc, nxt


def test_rejection_inputs_are_the_keys_and_the_targets_probabilities():
    g = torch.Generator().manual_seed(5)
    batch, width, vocab = 3, 4, 16
    ones = torch.ones(batch * width)
    target = row_weights(torch.randn(batch * width, vocab, generator=g), ones, ones.int() * 0, ones).view(batch, width)
    drafts = torch.randint(0, vocab, (batch, width - 1), generator=g)
    drafts[0, 0] = vocab  # outside the vocabulary: p = 0
    seeds, pos = torch.tensor([0, -1, 2**63 - 1]), torch.tensor([0, 2**31, 17])
    tokens, p_at, u = rejection_inputs(drafts, torch.full((batch, width - 1), 0.5), None, target, seeds, pos)
    j = torch.arange(width - 1)
    assert torch.equal(u, philox_uniform(seeds[:, None], pos[:, None] + j, 0))
    want = target.probs[:, :-1].gather(2, drafts.clamp(max=vocab - 1)[..., None])[..., 0]
    want[0, 0] = 0
    assert torch.equal(p_at, want) and ((tokens >= 0) & (tokens < vocab)).all()


def _random_case(g, batch, width, vocab, greedy_share=0.25):
    rows = batch * width
    logits = torch.randn(rows, vocab, generator=g) * 2
    t = torch.rand(rows, generator=g) * 1.5
    t[torch.rand(rows, generator=g) < greedy_share] = 0
    k = torch.randint(0, vocab, (rows,), generator=g, dtype=torch.int32)
    p = 0.2 + 0.8 * torch.rand(rows, generator=g)
    p[torch.rand(rows, generator=g) < 0.03] = float("nan")  # rows without mass: every draft rejected, token 0
    target = row_weights(logits, t, k, p).view(batch, width)
    q = torch.softmax(torch.randn(batch, width - 1, vocab, generator=g) * 2, -1)
    x = torch.multinomial(q.reshape(-1, vocab), 1, generator=g).reshape(batch, width - 1)
    agree = torch.rand(x.shape, generator=g) < 0.3  # some drafts are the target's favourite
    x = torch.where(agree, torch.argmax(target.weights[:, :-1], -1), x)
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


def test_rejection_verify_equals_the_host_reference_on_large_totals():
    """A vocabulary of 2**14 mostly tied at the top: totals near 2**54, past float64's exact integers, where the
    probabilities round the totals and the draw's product ``U * T`` needs its split."""
    g = torch.Generator().manual_seed(4)
    batch, width, vocab = 16, 3, 2**14
    rows = batch * width
    logits = -(torch.rand(rows, vocab, generator=g) < 0.1).float() * torch.rand(rows, vocab, generator=g)
    ones = torch.ones(batch * width)
    top_p = torch.where(torch.rand(batch * width, generator=g) < 0.5, ones, ones * 0.5)
    target = row_weights(logits, ones, ones.int() * 0, top_p).view(batch, width)
    assert (target.totals > 2**53).all()
    x = torch.randint(0, vocab, (batch, width - 1), generator=g)
    qx = torch.where(torch.rand(x.shape, generator=g) < 0.5, torch.ones(x.shape), torch.full(x.shape, 2**-14))
    seeds = torch.randint(-(2**63), 2**63 - 1, (batch,), generator=g)
    pos = torch.randint(0, 2**40, (batch,), generator=g)
    acc, emitted = rejection_verify(x, qx, None, target, seeds, pos)
    ref_acc, ref_emitted = reference_rejection_verify(x, qx, None, target, seeds, pos)
    assert torch.equal(acc, ref_acc) and torch.equal(emitted, ref_emitted) and acc.any()


def _greedy_case(width: int, seed: int):
    """Temperature-0 rows (ties: lowest index wins) and drafts that mostly match: ``(target, drafts, seeds,
    positions, accepted, next_tokens)``, the last two ``greedy_prefix_verify``'s."""
    g = torch.Generator().manual_seed(seed)
    batch, vocab = 500, 6
    logits = torch.randint(0, 3, (batch * width, vocab), generator=g).float()
    zeros = torch.zeros(batch * width)
    target = row_weights(logits, zeros, zeros.int(), zeros + 1).view(batch, width)
    target_tokens = torch.argmax(logits, -1).reshape(batch, width).int()
    drafts = target_tokens[:, :-1].clone()
    wrong = torch.rand(drafts.shape, generator=g) < 0.3
    drafts[wrong] = torch.randint(0, vocab, (int(wrong.sum()),), generator=g, dtype=torch.int32)
    seeds, pos = torch.randint(0, 2**62, (batch,), generator=g), torch.randint(0, 2**31, (batch,), generator=g)
    want_acc, want_next = torch.zeros(batch, dtype=torch.int32), torch.zeros(batch, width, dtype=torch.int32)
    greedy_prefix_verify(drafts, target_tokens, want_acc, want_next)
    return target, drafts, seeds, pos, want_acc, want_next


@pytest.mark.parametrize("width", [2, 5])
def test_temperature_zero_reproduces_greedy_prefix_verify(width):
    target, drafts, seeds, pos, want_acc, want_next = _greedy_case(width, width)
    batch, vocab = drafts.shape[0], target.weights.shape[-1]
    ones = torch.ones(batch, width - 1)
    for dists in (None, torch.nn.functional.one_hot(drafts.long(), vocab).float()):
        acc, emitted = rejection_verify(drafts, ones, dists, target, seeds, pos)
        assert torch.equal(acc, want_acc) and torch.equal(emitted, want_next)


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
    target = row_weights(logits.reshape(-1, vocab), rows(t), rows(k), rows(top_p)).view(batch, width)
    q = torch.softmax(torch.randn(batch, width - 1, vocab, generator=g) * 2, -1)
    x = torch.multinomial(q.reshape(-1, vocab), 1, generator=g).reshape(batch, width - 1)
    x = torch.where(torch.rand(x.shape, generator=g) < 0.4, torch.argmax(target.weights[:, :-1], -1), x)
    qx = torch.gather(q, 2, x[..., None])[..., 0]
    if not dists:  # a greedy draft: one-hot at x with its q(x), mostly 1
        q, qx = None, torch.where(torch.rand(qx.shape, generator=g) < 0.8, torch.ones_like(qx), qx)
    x[::23, 0] = torch.tensor([-1, vocab])[torch.arange(x[::23].shape[0]) % 2]  # outside the vocabulary
    seeds = torch.randint(-(2**63), 2**63 - 1, (batch,), generator=g)
    pos = torch.randint(0, 2**40, (batch,), generator=g)
    want_acc, want_next = rejection_verify(x, qx, q, target, seeds, pos)
    acc, nxt = family(x, qx, q, target, seeds, pos, t)
    assert torch.equal(acc, want_acc) and torch.equal(nxt, want_next)
    assert 0 < acc.float().mean() < width - 1 and (acc[t > 0] < width - 1).any()


@pytest.mark.parametrize("width", [2, 5])
def test_the_kernel_family_at_temperature_zero_is_greedy_prefix_verify(width):
    target, drafts, seeds, pos, want_acc, want_next = _greedy_case(width, 7 + width)
    batch = drafts.shape[0]
    ones = torch.ones(batch, width - 1)
    acc, nxt = family(drafts, ones, None, target, seeds, pos, torch.zeros(batch))
    assert torch.equal(acc, want_acc) and torch.equal(nxt, want_next)
