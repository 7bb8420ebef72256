"""Sampled requests in the serving loop (float32, CPU): greedy and sampled requests in one batch, with arrivals,
finishes, stop tokens and preemptions; every request's tokens equal what a lone sampling engine gives for its
prompt under its parameters and seed (the random keys are the request's seed and the positions, not its row),
and a preempted sampled request's tokens equal those of a run without preemption."""

from __future__ import annotations

import dataclasses

import pytest
from oracles.serving import churn_requests, cut_at_stop, frequent_tokens

from specgen.engine import SpecDecodeEngine
from specgen.engine.draft_kinds import DRAFT_KINDS
from specgen.engine.serving import LengthDist, Workload
from specgen.engine.serving.loop import ServingLoop
from specgen.models.errors import EngineError
from specgen.runtime.sampling import SamplingParams

BT, BS = 8, 16
DEPTH = 3  # verify width 4: a width of the sampling kernels (tests/conftest.py)


@pytest.fixture(scope="module")
def stops(tiny):
    """Two token ids the tiny model's greedy decoding emits often: frequent stop tokens."""
    model, _ = tiny
    return frequent_tokens(model)


def sampled_workload(model, stops, n: int, seed: int, rate: float | None = 60.0):
    """``n`` requests with random arrivals and lengths, about half sampled (nucleus, and top-k on every third),
    the rest greedy."""
    reqs = churn_requests(model, stops, n, seed, rate)
    mixed = Workload(num_requests=n, sampling=SamplingParams(0.9, 0, 0.9, 100 * seed), sampled_share=0.5, seed=seed)
    for r, m in zip(reqs, mixed.requests()):
        r.sampling = m.sampling
        if r.sampling is not None and r.id % 3 == 0:
            r.sampling = dataclasses.replace(r.sampling, temperature=1.3, top_k=8, top_p=1.0)
    return reqs


def lone(tiny, reqs) -> dict[int, list[int]]:
    """Each request's tokens from a sampling engine (baseline: the host rule) with its parameters; the rows of
    one engine run are independent of each other (random keys: the row's seed and the positions)."""
    model, head = tiny
    engine = SpecDecodeEngine(
        model,
        head,
        mode="baseline",
        width=DEPTH + 1,
        batch=len(reqs),
        block_size=BS,
        block_table_width=BT,
        sampling=[r.params for r in reqs],
    )
    res = engine.run([list(r.prompt) for r in reqs], max_new_tokens=max(r.max_new_tokens for r in reqs))
    engine.close()
    return {r.id: cut_at_stop(out[: r.max_new_tokens], r.stop_ids) for r, out in zip(reqs, res.outputs)}


def serve(tiny, lib, mode, reqs, observer=None, **kw):
    model, head = tiny
    loop = ServingLoop(
        model,
        head,
        mode=mode,
        depth=DEPTH,
        max_batch=kw.pop("max_batch", 4),
        num_blocks=kw.pop("num_blocks", 10),
        block_size=BS,
        block_table_width=BT,
        max_prefill_tokens=16,
        kernels=lib if mode == "specgen" else None,
        sampling=True,
        **kw,
    )
    loop.observer = observer
    return loop, loop.run([dataclasses.replace(r, output=[]) for r in reqs])


@pytest.fixture(scope="module")
def mixed(tiny, stops):
    reqs = sampled_workload(tiny[0], stops, 24, seed=5)
    assert 0 < sum(r.sampled for r in reqs) < len(reqs)
    return reqs, lone(tiny, reqs)


@pytest.mark.parametrize("mode", ["baseline", "specgen"])
@pytest.mark.parametrize("read_lag", [0, 1])
def test_mixed_batch_equals_each_request_alone(tiny, sampling_kernels, mixed, mode, read_lag):
    """Churn over a 10-block pool: arrivals, stops, preemptions of sampled requests, rows moved and buckets
    changed; each request's tokens are its lone engine's."""
    reqs, want = mixed
    loop, run = serve(tiny, sampling_kernels, mode, reqs, read_lag=read_lag)
    for r in reqs:
        assert loop.requests[r.id].output == want[r.id], f"request {r.id} ({r.sampling})"
    assert run.preemptions > 0 and any(r.sampled and r.preemptions for r in loop.requests.values())
    assert sum(s.remaps for s in run.steps) > 0 and sum(s.joined for s in run.steps) >= len(reqs)
    # specgen: the built remap where the kernel folder has it (None), else its torch semantics
    why = {None, "not_built"} if mode == "specgen" else {"mode"}
    assert {s.remap_reason for s in run.steps if s.remaps or s.joined} <= why
    if mode == "specgen":
        assert all(s.fast_path for s in run.steps)


@pytest.mark.parametrize("mode", ["baseline", "specgen"])
def test_mixed_batch_with_prefill_graphs(tiny, sampling_kernels, mixed, mode):
    """The same churn with every chunk in a prefill graph's bucket (run eagerly here): a greedy request's last
    chunk takes its token in the graph, a sampled or resumed one draws it after the graph; each request's tokens
    are still its lone engine's."""
    reqs, want = mixed
    loop, run = serve(tiny, sampling_kernels, mode, reqs, read_lag=1, prefill_graphs=True)
    for r in reqs:
        assert loop.requests[r.id].output == want[r.id], f"request {r.id} ({r.sampling})"
    assert run.settings["prefill_graphs"] == [16] and loop.prefill_graphs.replays == run.prefill_chunks
    assert run.preemptions > 0 and any(r.sampled and r.preemptions for r in loop.requests.values())


class Resumed:
    """A loop observer: counts the sampled requests readmitted with output (their prefill stops before the last
    token)."""

    def __init__(self):
        self.n = 0

    def before_step(self, loop, out):
        for chunk in out.prefill:
            req = loop.requests[chunk.id]
            self.n += chunk.last and req.sampled and req.prefill_len == req.length - 1 and len(req.output) > 0

    def after_step(self, loop, out):
        pass


def test_a_preempted_sampled_request_gives_the_tokens_of_a_run_without_preemption(tiny, stops):
    """The same requests over a pool that preempts and one that never does: the same tokens, request for
    request; a readmitted sampled request prefills its prefix but its last token and draws nothing again."""
    reqs = sampled_workload(tiny[0], stops, 16, seed=10, rate=None)  # all at once: the schedule is fixed
    small_loop, small = serve(tiny, None, "baseline", reqs, num_blocks=9, observer=Resumed())
    big_loop, big = serve(tiny, None, "baseline", reqs, num_blocks=40)
    assert big.preemptions == 0 and small.preemptions > 0 and small_loop.observer.n > 0
    for rid, r in small_loop.requests.items():
        assert r.output == big_loop.requests[rid].output, f"request {rid}"


def test_requests_carry_their_parameters(tiny):
    """The workload gives a seeded share its own parameters (seed per request); a greedy loop refuses sampled
    requests; the rows' parameters are each step's requests' (padding rows greedy)."""
    base = SamplingParams(0.5, 4, 0.8, 7)
    w = Workload(num_requests=40, prompt_len=LengthDist.fixed(3), sampling=base, sampled_share=0.25, seed=1)
    reqs = w.requests()
    assert [r.sampling for r in reqs] == [r.sampling for r in w.requests()]  # seeded
    sampled = [r for r in reqs if r.sampling is not None]
    assert 0 < len(sampled) < len(reqs) and all(r.sampling == dataclasses.replace(base, seed=7 + r.id) for r in sampled)
    assert all(r.sampling is None for r in Workload(num_requests=5, sampling=base, sampled_share=0.0).requests())
    with pytest.raises(ValueError, match="sampled_share"):
        Workload(num_requests=1, sampled_share=1.5)
    model, head = tiny
    greedy_loop = ServingLoop(model, head, mode="baseline", depth=DEPTH, max_batch=2, num_blocks=8, block_size=BS)
    with pytest.raises(EngineError, match="sampling=True"):
        greedy_loop.run(reqs[:4] if sampled[0].id < 4 else [sampled[0]])

    class Rows:
        def before_step(self, loop, out):
            pass

        def after_step(self, loop, out):
            if out.verify:
                bufs = loop.engine.bufs
                ids = list(out.verify)
                seeds = bufs["seed"].tolist()
                assert seeds[: len(ids)] == [loop.requests[r].params.seed for r in ids]
                assert bufs["temperature"][len(ids) :].eq(0).all()
                self.seen = True

    loop = ServingLoop(model, head, mode="baseline", depth=DEPTH, max_batch=3, num_blocks=12, sampling=True)
    loop.observer = rows = Rows()
    loop.run([dataclasses.replace(r, prompt=(1, 2, 3), output=[]) for r in reqs[:8]])
    assert rows.seen and all(r.finished for r in loop.requests.values())


@pytest.mark.parametrize("kind", ["dflash", "dspark"])
@pytest.mark.parametrize("mode", ["baseline", "specgen"])
def test_block_drafts_serve_sampled_requests(tiny, sampling_kernels, stops, kind, mode):
    """A block draft (one-hot drafts: its context K/V written by every prefill chunk) in a mixed batch with
    preemptions: each request equals its lone sampling engine."""
    model, _ = tiny
    draft = DRAFT_KINDS[kind].create(model, seed=1)
    reqs = sampled_workload(model, stops, 12, seed=5, rate=None)
    engine = DRAFT_KINDS[kind].engine(
        model, draft, mode="baseline", width=DEPTH + 1, batch=len(reqs), block_size=BS, block_table_width=BT,
        sampling=[r.params for r in reqs],
    )  # fmt: skip
    res = engine.run([list(r.prompt) for r in reqs], max_new_tokens=max(r.max_new_tokens for r in reqs))
    engine.close()
    loop, run = serve((model, draft), sampling_kernels, mode, reqs)
    assert run.preemptions > 0
    for r, out in zip(reqs, res.outputs):
        assert loop.requests[r.id].output == cut_at_stop(out[: r.max_new_tokens], r.stop_ids), f"request {r.id}"


@pytest.mark.parametrize("mode", ["baseline", "specgen"])
def test_sampled_drafts_over_a_draft_vocabulary_through_churn(tiny, sampling_kernels, stops, mode):
    """The MTP draft over 60 listed ids (``draft_vocab``): its draws read the subset's logits and write ``q`` into
    the subset's columns of rows that move, join and leave; each request's tokens are its lone engine's with the
    same subset, and every drafted token lies in it."""
    import torch

    from specgen.models.draft_vocab import DraftVocab

    model, head = tiny
    reqs = sampled_workload(model, stops, 16, seed=8)
    ids = torch.randperm(model.config.vocab_size, generator=torch.Generator().manual_seed(9))[:60]
    head.draft_vocab = DraftVocab(model.lm_head_weight, ids.tolist())
    try:
        want = lone(tiny, reqs)
        loop, run = serve(tiny, sampling_kernels, mode, reqs, read_lag=1)
        drafts = loop.engine.bufs["draft_tokens"].long()
    finally:
        head.draft_vocab = None
    for r in reqs:
        assert loop.requests[r.id].output == want[r.id], f"request {r.id} ({r.sampling})"
    assert run.preemptions > 0 and sum(s.remaps for s in run.steps) > 0
    assert loop.engine.sampling.draft_vocab is not None and torch.isin(drafts, ids).all()
    if mode == "specgen":
        assert all(s.fast_path for s in run.steps) and loop.engine.sampling.draft_kernel is not None
