"""Drafts over a reduced draft vocabulary (``draft_vocab``): the MTP head in every mode, DFlash and DSpark.

Decoding stays exact (the target verifies with its whole head); every drafted token lies in the subset; with
every id listed in a shuffled order the drafts are the whole head's, so the index -> token map is exact; a
sampling draft draws from its distribution widened with zeros outside the subset, the same in every mode."""

from __future__ import annotations

import random

import pytest
import torch
from oracles.hybrid_reference import hybrid_greedy

from specgen.engine import greedy_generate
from specgen.engine.draft_kinds import DRAFT_KINDS
from specgen.models import Qwen3Model
from specgen.models.draft_vocab import DraftVocab, apply_draft_vocab
from specgen.models.qwen3_5 import Qwen35Model
from specgen.runtime.sampling import SamplingParams

BT, BS, NEW = 8, 16, 12
MODES = ("baseline", "compile", "specgen", "inductor")


def _prompts(n: int, seed: int, vocab: int = 512) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(rng.randint(1, 10))] for _ in range(n)]


def _run(model, head, mode, width, prompts, library, kind="mtp", **kw):
    """``(result, drafted tokens)``: every token the MTP chain's ``_pick`` or a block draft's ``propose`` gave."""
    eng = DRAFT_KINDS[kind].engine(model, head, mode=mode, width=width, batch=len(prompts), block_size=BS,
                                   block_table_width=BT, library=library, compile_backend="eager", **kw)  # fmt: skip
    owner, name = (eng.proposer, "_pick") if kind == "mtp" else (head, "propose")
    drafted, inner = [], getattr(owner, name)

    def recorded(*args):
        out = inner(*args)
        drafted.append(out.reshape(-1).clone())
        return out

    setattr(owner, name, recorded)
    try:
        return eng.run(prompts, max_new_tokens=NEW), torch.cat(drafted)
    finally:
        delattr(owner, name) if owner is head else None
        eng.close()


@pytest.fixture(scope="module")
def dense():
    model = Qwen3Model.create("tiny", seed=0)
    return model, DRAFT_KINDS["mtp"].create(model, seed=1)


@pytest.mark.parametrize("mode", MODES)
def test_a_prefix_vocabulary_drafts_inside_it_and_stays_exact(dense, engine_kernels, mode):
    model, head = dense
    prompts = _prompts(3, seed=4)
    head.draft_vocab = DraftVocab(model.lm_head_weight, 64)
    try:
        res, drafted = _run(model, head, mode, 4, prompts, engine_kernels)
    finally:
        head.draft_vocab = None
    assert res.outputs == greedy_generate(model, prompts, NEW)
    assert drafted.numel() >= 3 * 3 and int(drafted.max()) < 64
    if mode == "specgen":
        assert res.runtime_stats["fallback"] == {}


@pytest.mark.parametrize("mode", ["baseline", "specgen"])
def test_every_id_shuffled_drafts_what_the_whole_head_drafts(dense, engine_kernels, mode):
    model, head = dense
    prompts = _prompts(2, seed=7)
    whole, whole_drafts = _run(model, head, mode, 3, prompts, engine_kernels)
    order = torch.randperm(model.config.vocab_size, generator=torch.Generator().manual_seed(5))
    head.draft_vocab = DraftVocab(model.lm_head_weight, order.tolist())
    try:
        res, drafted = _run(model, head, mode, 3, prompts, engine_kernels)
    finally:
        head.draft_vocab = None
    assert torch.equal(drafted, whole_drafts) and res.outputs == whole.outputs


def test_sampling_drafts_draw_inside_the_subset_alike_in_every_mode(dense, sampling_kernels):
    """Mixed greedy and sampled rows, drafts drawn from their own filtered distributions (``sample``)."""
    model, head = dense
    params = [SamplingParams(0.7, 0, 0.9, 5), SamplingParams(0.0), SamplingParams(1.0, 8, 1.0, -3)]
    prompts = _prompts(3, seed=9)
    ids = torch.randperm(model.config.vocab_size, generator=torch.Generator().manual_seed(6))[:40]
    head.draft_vocab = DraftVocab(model.lm_head_weight, ids.tolist())
    runs = {}
    try:
        for mode in ("baseline", "specgen"):
            runs[mode] = _run(model, head, mode, 4, prompts, sampling_kernels, sampling=params, draft_sampling="sample")
    finally:
        head.draft_vocab = None
    (ref, ref_drafts), (res, drafted) = runs["baseline"], runs["specgen"]
    assert (res.outputs, res.accepted) == (ref.outputs, ref.accepted) and torch.equal(drafted, ref_drafts)
    assert torch.isin(drafted.long(), ids).all()
    assert res.outputs[1] == greedy_generate(model, [prompts[1]], NEW)[0]  # the greedy row


@pytest.mark.parametrize("mode", ["baseline", "specgen"])
@pytest.mark.parametrize("listed", [False, True])
def test_a_sampling_draft_over_the_subset_draws_what_the_widened_row_draws(dense, sampling_kernels, mode, listed):
    """The draft's pass over the subset's logits (``spec_draft_sample`` over N tokens in specgen, the torch ops in
    baseline), ``q`` written into the subset's columns, against the whole-vocabulary pass over the same logits
    widened with ``-inf``: the same drafts, ``q``, tokens and acceptance, bit for bit."""
    model, head = dense
    params = [SamplingParams(0.8, 0, 0.9, 21), SamplingParams(1.0, 5, 1.0, 4), SamplingParams(0.0)]
    prompts = _prompts(3, seed=17)
    ids = torch.randperm(model.config.vocab_size, generator=torch.Generator().manual_seed(18))[:48]
    vocab = DraftVocab(model.lm_head_weight, ids.tolist() if listed else 48)
    kw = dict(sampling=params, draft_sampling="sample")
    head.draft_vocab = vocab
    try:
        subset, subset_drafts = _run(model, head, mode, 4, prompts, sampling_kernels, **kw)
    finally:
        head.draft_vocab = None
    inner = head.forward

    def widened(*args, **kwargs):  # the subset's logits as whole rows, -inf outside it
        head.draft_vocab = vocab
        try:
            h, logits = inner(*args, **kwargs)
        finally:
            head.draft_vocab = None
        return h, None if logits is None else vocab.widen(logits)

    head.forward = widened
    try:
        wide, wide_drafts = _run(model, head, mode, 4, prompts, sampling_kernels, **kw)
    finally:
        del head.forward
    assert (subset.outputs, subset.accepted) == (wide.outputs, wide.accepted)
    assert torch.equal(subset_drafts, wide_drafts)
    assert torch.isin(subset_drafts.long(), vocab.tokens(torch.arange(48))).all()


@pytest.mark.parametrize("mode", ["baseline", "specgen"])
def test_the_hybrid_targets_draft_over_a_subset_stays_exact(hybrid_kernels, mode):
    model = Qwen35Model.create("qwen3.5-tiny", seed=0)
    head = DRAFT_KINDS["mtp"].create(model, seed=1)
    head.draft_vocab = DraftVocab(model.lm_head_weight, 100)
    prompts = _prompts(2, seed=11, vocab=model.config.vocab_size)
    res, drafted = _run(model, head, mode, 4, prompts, hybrid_kernels)
    assert res.outputs == hybrid_greedy(model, prompts, NEW)
    assert int(drafted.max()) < 100


@pytest.mark.gpu
@pytest.mark.parametrize(
    "kind, mode",
    [("mtp", "baseline"), ("mtp", "compile"), ("mtp", "specgen"), ("dflash", "specgen"), ("dspark", "specgen")],
)
def test_cuda_graphs_draft_over_listed_ids_and_stay_exact(hybrid_kernels, kind, mode):
    """The gathered rows and the index -> token map inside CUDA graphs (the hybrid target, float32)."""
    model = Qwen35Model.create("qwen3.5-tiny", seed=0, device="cuda")
    draft = DRAFT_KINDS[kind].create(model, seed=1)
    ids = torch.randperm(model.config.vocab_size, generator=torch.Generator().manual_seed(8))[:120]
    apply_draft_vocab(draft, model.lm_head_weight, ids.tolist())
    prompts = _prompts(3, seed=12, vocab=model.config.vocab_size)
    eng = DRAFT_KINDS[kind].engine(model, draft, mode=mode, width=4, batch=3, block_size=BS, block_table_width=BT,
                                   library=hybrid_kernels, compile_backend="inductor")  # fmt: skip
    res = eng.run(prompts, max_new_tokens=NEW, timing=True)
    drafted = eng.bufs["draft_tokens"].long().cpu()  # the last step's drafts
    eng.close()
    assert res.outputs == hybrid_greedy(model, prompts, NEW)
    assert torch.isin(drafted, ids).all()
    if mode == "specgen":
        assert res.runtime_stats["fallback"] == {} and all(t.host_syncs == 0 for t in res.timings)


@pytest.mark.gpu
@pytest.mark.parametrize("listed", [False, True])
def test_cuda_graphs_sample_drafts_over_the_subset_as_baseline_does(sampling_kernels, listed):
    """A sampling MTP draft over a subset in CUDA graphs (float32, no TF32): specgen's ``spec_draft_sample`` over N
    logits and its scatter of ``q`` equal baseline's torch ops, drafts inside the subset, 0 host syncs a step."""
    torch.backends.cuda.matmul.allow_tf32 = False
    model = Qwen3Model.create("tiny", seed=0, device="cuda")
    head = DRAFT_KINDS["mtp"].create(model, seed=1)
    ids = torch.randperm(model.config.vocab_size, generator=torch.Generator().manual_seed(19))[:96]
    vocab = apply_draft_vocab(head, model.lm_head_weight, ids.tolist() if listed else 96)
    params = [SamplingParams(0.8, 0, 0.9, 21), SamplingParams(1.0, 5, 1.0, 4), SamplingParams(0.0)]
    prompts = _prompts(3, seed=20)
    runs = {}
    for mode in ("baseline", "specgen"):
        eng = DRAFT_KINDS["mtp"].engine(model, head, mode=mode, width=4, batch=3, block_size=BS, block_table_width=BT,
                                        library=sampling_kernels, sampling=params, draft_sampling="sample")  # fmt: skip
        res = eng.run(prompts, max_new_tokens=NEW)
        drafts = eng.bufs["draft_tokens"].long().cpu()  # the last step's drafts
        if mode == "specgen":
            assert eng.sampling.draft_kernel is not None and eng.sampling.draft_dist.shape == (3, 96)
            timed = eng.run(prompts, steps=6, warmup_steps=2, timing=True)
            assert [t.host_syncs for t in timed.timings] == [0] * 6
        eng.close()
        runs[mode] = (res.outputs, res.accepted, drafts)
    assert runs["specgen"][:2] == runs["baseline"][:2]  # (the last drafts: each mode may draft a step more)
    for mode in runs:
        assert torch.isin(runs[mode][2], vocab.tokens(torch.arange(96, device="cuda")).cpu()).all()


@pytest.mark.parametrize("kind", ["dflash", "dspark"])
@pytest.mark.parametrize("mode", ["baseline", "specgen"])
def test_block_drafts_over_a_subset_stay_exact_and_map_back(dense, block_kernels, kind, mode):
    """Every id shuffled: the whole head's drafts (DSpark's Markov bias over the same rows); the first 64 ids:
    drafts inside them, the target's greedy tokens."""
    model = dense[0]
    draft = DRAFT_KINDS[kind].create(model, seed=1)
    prompts = _prompts(2, seed=13)
    whole, whole_drafts = _run(model, draft, mode, 4, prompts, block_kernels, kind)
    order = torch.randperm(model.config.vocab_size, generator=torch.Generator().manual_seed(14))
    apply_draft_vocab(draft, model.lm_head_weight, order.tolist())
    shuffled, drafted = _run(model, draft, mode, 4, prompts, block_kernels, kind)
    assert torch.equal(drafted, whole_drafts) and shuffled.outputs == whole.outputs
    apply_draft_vocab(draft, model.lm_head_weight, 64)
    res, drafted = _run(model, draft, mode, 4, prompts, block_kernels, kind)
    assert res.outputs == greedy_generate(model, prompts, NEW) and int(drafted.max()) < 64
    if kind == "dspark":
        assert draft.markov_head.vocab_w2.shape == (64, draft.markov_head.w2.weight.shape[1])


def test_the_host_loop_maps_back_too(dense, monkeypatch):
    """``speculative_generate`` (the host-driven reference loop): every id shuffled drafts the whole head's tokens."""
    from specgen.engine import decode

    model, head = dense
    prompts = _prompts(2, seed=15)
    seen, chain = [], decode._draft_chain
    monkeypatch.setattr(decode, "_draft_chain", lambda *a: seen.append(chain(*a)) or seen[-1])
    whole, _ = decode.speculative_generate(model, head, prompts, NEW, 3)
    whole_drafts, seen[:] = torch.cat(seen), []
    order = torch.randperm(model.config.vocab_size, generator=torch.Generator().manual_seed(16))
    head.draft_vocab = DraftVocab(model.lm_head_weight, order.tolist())
    try:
        out, _ = decode.speculative_generate(model, head, prompts, NEW, 3)
    finally:
        head.draft_vocab = None
    assert out == whole == greedy_generate(model, prompts, NEW) and torch.equal(torch.cat(seen), whole_drafts)
