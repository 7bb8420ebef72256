"""The draft's context K/V: equal bit for bit to a compact per-sequence reference after every step.

Commit lengths are forced with the acceptance control (random weights accept
almost nothing).  After each step of every mode, the paged draft cache holds,
for every position ``p < S'`` of sequence b, exactly the reference's row p,
and every other slot is still zero: rejected rows wrote nothing.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracles.block_context import context_reference, forced_acceptance, paged_context

from specgen.engine import greedy_generate
from specgen.engine.draft_kinds import DRAFT_KINDS
from specgen.models import Qwen3Model
from specgen.models.block_draft import BlockDraft, BlockDraftConfig, MarkovHead, tap_layers

BT, BS = 8, 16
PROMPTS = [[5, 6, 7, 8, 9], [1, 2, 3], [40, 41, 42, 43, 44, 45, 46]]


@pytest.fixture(scope="module")
def oracle(tiny_target):
    return torch.tensor(greedy_generate(tiny_target, PROMPTS, 90))


def _check_every_step(model, draft, kernels, mode, commits, depth, oracle, device="cpu"):
    """Run ``mode`` with forced ``commits``; after each verification compare the cache with the reference."""
    steps = len(commits[0])
    mix = forced_acceptance(oracle.to(device), model.config.vocab_size, commits, depth)
    outputs, history, ctx = context_reference(
        model, draft, PROMPTS, mix, steps, depth, block_size=BS, block_table_width=BT
    )
    assert history == [list(c) for c in zip(*commits)]  # the control forced exactly these
    eng = DRAFT_KINDS[draft.kind].engine(
        model,
        draft,
        mode=mode,
        width=depth + 1,
        batch=len(PROMPTS),
        block_size=BS,
        block_table_width=BT,
        library=kernels,
        acceptance=mix,
        compile_backend="eager",
    )
    seen, verify = [], eng.strategy.verify

    def checked(lo, hi, mark):
        out = verify(lo, hi, mark)
        i = len(seen)
        lens = [len(p) + sum(a + 1 for a in c[: i + 1]) for p, c in zip(PROMPTS, commits)]
        rows, others = paged_context(draft, eng.block_table, lens)
        for b, per_layer in enumerate(rows):
            for layer, (k, v) in enumerate(per_layer):
                ref_k, ref_v = ctx[b][layer]
                assert torch.equal(k, ref_k[: lens[b]]) and torch.equal(v, ref_v[: lens[b]]), (mode, i, b, layer)
        assert all(bool((t == 0).all()) for kv in others for t in kv), (mode, i, "a rejected row was written")
        seen.append(i)
        return out

    eng.strategy.verify = checked
    res = eng.run(PROMPTS, steps=steps)
    assert seen == list(range(steps))
    assert [o[: len(r)] for o, r in zip(res.outputs, outputs)] == outputs


@pytest.mark.parametrize("kind", ["dflash", "dspark"])
def test_every_commit_length_keeps_the_cache_exact(tiny_target, block_kernels, oracle, kind):
    """Commit lengths 1..W (accepted 0..K) in every sequence, K = 3 and 7, all three modes."""
    draft = DRAFT_KINDS[kind].create(tiny_target, seed=1)
    for depth in (3, 7):
        w = depth + 1
        # sequence b walks through every accepted count 0..K, shifted so that the batch mixes them
        commits = [[(i + 2 * b) % w for i in range(w)] for b in range(len(PROMPTS))]
        for mode in DRAFT_KINDS["dflash"].modes:
            _check_every_step(tiny_target, draft, block_kernels, mode, commits, depth, oracle)


def test_prefill_writes_every_prompt_row(tiny_target, block_kernels, oracle):
    draft = DRAFT_KINDS["dflash"].create(tiny_target, seed=1)
    mix = forced_acceptance(oracle, tiny_target.config.vocab_size, [[0]] * 3, 3)
    _, _, ctx = context_reference(tiny_target, draft, PROMPTS, mix, 0, 3, block_size=BS, block_table_width=BT)
    eng = DRAFT_KINDS["dflash"].engine(
        tiny_target, draft, mode="baseline", width=4, batch=3, block_size=BS, block_table_width=BT
    )
    eng._setup(PROMPTS, 20)
    eng._prefill(PROMPTS)
    rows, others = paged_context(draft, eng.block_table, [len(p) for p in PROMPTS])
    for b, p in enumerate(PROMPTS):
        for layer in range(draft.config.num_layers):
            assert rows[b][layer][0].shape[0] == len(p)
            assert torch.equal(rows[b][layer][0], ctx[b][layer][0]) and torch.equal(rows[b][layer][1], ctx[b][layer][1])
            assert bool(rows[b][layer][0].abs().sum(dim=(1, 2)).gt(0).all())  # every prompt row written
    assert all(bool((t == 0).all()) for kv in others for t in kv)


def test_markov_chain_equals_its_sequential_reference():
    torch.manual_seed(0)
    head = MarkovHead(vocab_size=50, rank=4)
    logits, anchor = torch.randn(5, 7, 50), torch.randint(0, 50, (5,))
    got = head.chain(logits, anchor)
    w1, w2 = head.w1.weight, head.w2.weight  # [V, r], [V, r]
    for b in range(5):
        prev = int(anchor[b])
        for j in range(7):
            bias = torch.stack([w2[v] @ w1[prev] for v in range(50)])  # (W2 @ W1[prev])[v], one entry at a time
            choice = int(torch.argmax(logits[b, j] + bias))
            assert int(got[b, j]) == choice
            prev = choice


def test_dspark_rows_use_the_markov_bias(tiny_target):
    """DSpark's K rows predict S+1..S+K; with the Markov head zeroed its drafts are the rows' own argmax."""
    cfg = BlockDraftConfig.default("dspark", 2, 512)
    draft = BlockDraft.create(tiny_target, cfg, seed=3)
    draft.allocate_kv_cache(1 + 2 * BT, BS)
    bt = (1 + torch.arange(2 * BT, dtype=torch.int32)).view(2, BT)
    anchor, lens = torch.tensor([7, 9]), torch.tensor([3, 5], dtype=torch.int32)
    with_bias = draft.propose(anchor, lens, bt, 5)
    pos = (lens.long()[:, None] + torch.arange(5)).reshape(-1)
    toks = torch.cat([anchor[:, None], torch.full((2, 4), cfg.mask_token_id)], 1).reshape(-1)
    logits = draft(toks, pos, bt, lens, 5)
    with torch.no_grad():
        draft.markov_head.w2.weight.zero_()
    assert torch.equal(draft.propose(anchor, lens, bt, 5), logits.argmax(-1))
    assert with_bias.shape == (2, 5)


def test_tap_layers_spread_and_never_the_last():
    assert tap_layers(28, 5) == (1, 7, 13, 19, 25)
    assert tap_layers(2, 3) == (0,)
    assert all(max(tap_layers(n, 4)) < n - 1 for n in range(2, 40))


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.sampled_from(["dflash", "dspark"]),
    st.sampled_from(sorted(DRAFT_KINDS["dflash"].modes)),
    st.lists(st.lists(st.integers(0, 3), min_size=6, max_size=6), min_size=3, max_size=3),
)
def test_random_commit_patterns_keep_the_cache_invariant(tiny_target, block_kernels, oracle, kind, mode, commits):
    draft = DRAFT_KINDS[kind].create(tiny_target, seed=2)
    _check_every_step(tiny_target, draft, block_kernels, mode, commits, 3, oracle)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["dflash", "dspark"])
@pytest.mark.parametrize("beside", ["1", "0"])
def test_cuda_context_cache_is_exact(block_kernels, kind, beside, monkeypatch):
    """On CUDA, through the captured graphs: after the run the cache equals the reference bit for bit, with the
    context rows made beside the forward (``SPECGEN_CONTEXT_BESIDE``, the fast path's default) and after it."""
    from specgen.engine.proposers.block import BESIDE_ENV

    monkeypatch.setenv(BESIDE_ENV, beside)
    torch.backends.cuda.matmul.allow_tf32 = False
    model = Qwen3Model.create("tiny", seed=0, device="cuda")
    oracle = torch.tensor(greedy_generate(model, PROMPTS, 90), device="cuda")
    draft = DRAFT_KINDS[kind].create(model, seed=1)
    depth, commits = 7, [[(i + 3 * b) % 8 for i in range(8)] for b in range(3)]
    mix = forced_acceptance(oracle, model.config.vocab_size, commits, depth)
    _, history, ctx = context_reference(model, draft, PROMPTS, mix, 8, depth, block_size=BS, block_table_width=BT)
    assert history == [list(c) for c in zip(*commits)]
    lens = [len(p) + sum(a + 1 for a in c) for p, c in zip(PROMPTS, commits)]
    for mode in DRAFT_KINDS["dflash"].modes:
        eng = DRAFT_KINDS[kind].engine(
            model,
            draft,
            mode=mode,
            width=depth + 1,
            batch=3,
            block_size=BS,
            block_table_width=BT,
            library=block_kernels,
            acceptance=mix,
        )
        eng.run(PROMPTS, steps=8)
        torch.cuda.synchronize()
        staged = eng.proposer._beside is not None  # the tail stored the rows staged beside the forward
        assert staged == (beside == "1" and draft.fast_on(model.embed_tokens.weight.device)), mode
        assert eng.proposer._held is None, mode  # every fork joined
        rows, others = paged_context(draft, eng.block_table, lens)
        for b in range(3):
            for layer, (k, v) in enumerate(rows[b]):
                assert torch.equal(k, ctx[b][layer][0]) and torch.equal(v, ctx[b][layer][1]), (mode, b, layer)
        assert all(bool((t == 0).all()) for kv in others for t in kv), mode
