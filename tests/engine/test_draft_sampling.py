"""``draft_sampling="argmax"``: a sampling engine whose MTP draft proposes its argmax (one-hot ``q``) instead of
drawing from its own filtered distribution. Every mode equals baseline's host rule; each drafted token is the
head's argmax with ``q(x) = 1`` and no draft distribution is kept; the serving loop threads the choice through."""

from __future__ import annotations

import random

import pytest
import torch

from specgen.engine import SpecDecodeEngine, greedy_generate
from specgen.engine.draft_kinds import DRAFT_KINDS
from specgen.engine.serving import Request
from specgen.engine.serving.loop import ServingLoop
from specgen.models import Qwen3Model
from specgen.models.errors import EngineError
from specgen.runtime.sampling import SamplingParams

BT, BS, NEW = 8, 16, 14
MIXED = (SamplingParams(0.7, 0, 0.9, 5), SamplingParams(0.0), SamplingParams(1.0, 8, 1.0, -3))


@pytest.fixture(scope="module")
def tiny():
    model = Qwen3Model.create("tiny", seed=0)
    return model, DRAFT_KINDS["mtp"].create(model, seed=1)


def _prompts(n: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(512) for _ in range(rng.randint(1, 10))] for _ in range(n)]


def _engine(tiny, mode, width, kernels, draft_sampling="argmax", backend="eager"):
    model, head = tiny
    return SpecDecodeEngine(model, head, mode=mode, width=width, batch=len(MIXED), block_size=BS,
                            block_table_width=BT, library=kernels, sampling=list(MIXED),
                            draft_sampling=draft_sampling, compile_backend=backend)  # fmt: skip


@pytest.mark.parametrize("width", [3, 4])
def test_every_mode_equals_the_host_rule_with_argmax_drafts(tiny, sampling_kernels, width):
    prompts = _prompts(len(MIXED), seed=width)
    runs = {}
    for mode in ("baseline", "compile", "specgen", "inductor"):
        eng = _engine(tiny, mode, width, sampling_kernels)
        runs[mode] = eng.run(prompts, max_new_tokens=NEW)
        assert eng.sampling.dists is None and not eng.sampling.draft_samples, mode
        assert torch.equal(eng.bufs["draft_probs"], torch.ones_like(eng.bufs["draft_probs"])), mode
        if mode == "specgen":
            assert eng.sampling.target_kernel is not None and eng.sampling.draft_kernel is None
            assert runs[mode].runtime_stats["fallback"] == {}
        eng.close()
    ref = runs["baseline"]
    for mode, res in runs.items():
        assert (res.outputs, res.accepted) == (ref.outputs, ref.accepted), mode
    assert ref.outputs[1] == greedy_generate(tiny[0], [prompts[1]], NEW)[0]  # the greedy row


@pytest.mark.parametrize("how", ["argmax", "sample"])
def test_each_drafted_token_is_the_heads_argmax(tiny, sampling_kernels, how):
    """With ``argmax`` every drafted token is the head's argmax; with ``sample`` (the default) the sampled rows'
    drafts are draws, some of them not the argmax."""
    eng = _engine(tiny, "baseline", 4, sampling_kernels, how)
    seen = []
    pick = eng.proposer._pick

    def checked(logits, positions, index):
        out = pick(logits, positions, index)
        seen.append(torch.equal(out.long(), logits.argmax(-1)))
        return out

    eng.proposer._pick = checked
    eng.run(_prompts(len(MIXED), seed=2), max_new_tokens=NEW)
    eng.close()
    assert len(seen) >= 6 and all(seen) == (how == "argmax")


def test_a_bad_draft_sampling_is_refused(tiny, sampling_kernels):
    with pytest.raises(EngineError, match="draft_sampling must be one of sample, argmax"):
        _engine(tiny, "baseline", 4, None, "top")
    eng = _engine(tiny, "baseline", 4, sampling_kernels)  # one-hot drafts take the argmax, never a draw
    with pytest.raises(EngineError, match="drafts are one-hot"):
        eng.sampling.draft(torch.zeros(len(MIXED), 8), torch.zeros(len(MIXED), dtype=torch.int64), 0)


@pytest.mark.parametrize("mode", ["baseline", "specgen"])
def test_the_serving_loop_serves_with_argmax_drafts(tiny, sampling_kernels, mode):
    """Sampled and greedy requests under churn (a pool that preempts): each request's tokens are those of a lone
    argmax-draft engine with its parameters."""
    model, head = tiny
    prompts = _prompts(6, seed=9)
    params = [MIXED[i % 3] for i in range(6)]
    lone = SpecDecodeEngine(model, head, mode="baseline", width=4, batch=6, block_size=BS, block_table_width=BT,
                            sampling=params, draft_sampling="argmax")  # fmt: skip
    want = lone.run(prompts, max_new_tokens=12).outputs
    lone.close()
    loop = ServingLoop(model, head, mode=mode, depth=3, max_batch=4, num_blocks=6, block_size=BS,
                       block_table_width=BT, max_prefill_tokens=16, kernels=sampling_kernels, sampling=True,
                       draft_sampling="argmax", read_lag=1, compile_backend="eager")  # fmt: skip
    assert loop.engine.sampling.draft_sampling == "argmax"
    reqs = [Request(i, tuple(p), 12, sampling=s) for i, (p, s) in enumerate(zip(prompts, params))]
    run = loop.run(reqs)
    assert {r.id: loop.requests[r.id].output for r in reqs} == {i: w[:12] for i, w in enumerate(want)}
    assert run.preemptions > 0


@pytest.mark.gpu
def test_cuda_argmax_drafts_equal_the_host_rule_with_no_host_sync(sampling_kernels):
    """In CUDA graphs (float32, no TF32): every mode equals baseline's host rule with argmax drafts, the specgen
    step runs the one-hot vocabulary pass and no draft pass, and syncs the host 0 times."""
    torch.backends.cuda.matmul.allow_tf32 = False
    model = Qwen3Model.create("tiny", seed=0, device="cuda")
    tiny = (model, DRAFT_KINDS["mtp"].create(model, seed=1))
    prompts = _prompts(len(MIXED), seed=4)
    outs = {}
    for mode in ("baseline", "compile", "specgen", "inductor"):
        eng = _engine(tiny, mode, 4, sampling_kernels, backend="inductor")
        res = eng.run(prompts, max_new_tokens=NEW)
        outs[mode] = (res.outputs, res.accepted)
        if mode == "specgen":
            assert eng.sampling.target_kernel is not None and eng.sampling.draft_kernel is None
            timed = eng.run(prompts, steps=6, warmup_steps=2, timing=True)
            assert [t.host_syncs for t in timed.timings] == [0] * 6 and timed.runtime_stats["fallback"] == {}
        eng.close()
    assert all(o == outs["baseline"] for o in outs.values()), outs
