"""A block draft at the end of specgen's step graph (``draft_at_end``, the default): the step graph drafts for the
next step, the draft graph runs only before the first, and the tokens, the accepted drafts and a fallback step are
those of the draft in its own graph (``draft_at_end=False``)."""

from __future__ import annotations

import random

import pytest
import torch

from specgen.engine import greedy_generate
from specgen.engine.acceptance import AcceptanceMix
from specgen.engine.draft_kinds import DRAFT_KINDS
from specgen.engine.graphs import CapturedGraph
from specgen.models import Qwen3Model
from specgen.models.errors import EngineError

BT, BS, NEW = 8, 16, 18
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
CASES = [("dflash", 3, 1), ("dflash", 7, 5), ("dspark", 3, 3), ("dspark", 7, 8)]


def _prompts(batch: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(512) for _ in range(rng.randint(1, 10))] for _ in range(batch)]


class _ForcedFallback:
    """Steps ``at`` leave the fast path: the runtime's host-side check gives a reason there."""

    def __init__(self, at: set[int]):
        self.at = at

    def before_step(self, engine, i):
        rt = engine.strategy.runtime
        if i in self.at:
            rt._reason = lambda *a, **k: "forced"
        else:
            rt.__dict__.pop("_reason", None)

    def after_step(self, engine, i):
        pass


def _engine(model, draft, kind, depth, batch, kernels, mix, at_end, observer=None):
    eng = DRAFT_KINDS[kind].engine(
        model,
        draft,
        mode="specgen",
        width=depth + 1,
        batch=batch,
        block_size=BS,
        block_table_width=BT,
        library=kernels,
        acceptance=mix,
        draft_at_end=at_end,
    )
    eng.observer = observer
    launches = []

    def graph(fn):  # count the draft graph's launches
        g = CapturedGraph(fn, eng.device, eng.pool)
        if fn == eng._draft:
            inner = g.__call__
            g = type("Counted", (), {"__call__": lambda self: (launches.append(1), inner())})()
        return g

    eng.graph = graph
    return eng, launches


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind,depth,batch", CASES)
def test_draft_at_end_is_the_own_graph_draft(block_kernels, kind, depth, batch, device):
    torch.backends.cuda.matmul.allow_tf32 = False
    model = Qwen3Model.create("tiny", seed=0, device=device)
    prompts = _prompts(batch, seed=depth * 10 + batch)
    greedy = greedy_generate(model, prompts, NEW)
    oracle = torch.tensor(greedy_generate(model, prompts, NEW + 3 * (depth + 1) + 1), device=device)
    draft = DRAFT_KINDS[kind].create(model, seed=1)
    for p in (None, 0.7):
        runs = {}
        for at_end in (False, True):
            mix = AcceptanceMix(p, oracle, model.config.vocab_size, seed=batch) if p is not None else None
            eng, launches = _engine(model, draft, kind, depth, batch, block_kernels, mix, at_end)
            assert eng.strategy.trails_draft is at_end and not eng.strategy.fuses_draft
            res = runs[at_end] = eng.run(prompts, max_new_tokens=NEW)
            assert res.outputs == greedy, (kind, depth, batch, p, at_end)
            assert res.runtime_stats["fallback"] == {} and res.fused_draft is at_end
            assert (res.runtime_stats["graph"][-1] == "next_draft") is at_end
            # the draft graph before every step, or only before the first (the step graphs draft after it)
            assert len(launches) == (1 if at_end else res.steps)
            eng.close()
        assert runs[True].accepted == runs[False].accepted and runs[True].steps == runs[False].steps
        if p is not None:
            assert runs[True].accepted > 0


@pytest.mark.parametrize("kind", ["dflash", "dspark"])
def test_a_fallback_step_drafts_for_the_next_step_too(block_kernels, kind):
    """An eager step runs the epilogue after its tail, the next step's draft included: the fast step after it reads
    drafts made from that step's results."""
    model = Qwen3Model.create("tiny", seed=0, device="cpu")
    prompts = _prompts(4, seed=7)
    greedy = greedy_generate(model, prompts, NEW)
    oracle = torch.tensor(greedy_generate(model, prompts, NEW + 3 * 4 + 1))
    draft = DRAFT_KINDS[kind].create(model, seed=1)
    mix = AcceptanceMix(0.8, oracle, model.config.vocab_size, seed=3)
    base, _ = _engine(model, draft, kind, 3, 4, block_kernels, mix, False)
    want = base.run(prompts, max_new_tokens=NEW)
    eng, launches = _engine(model, draft, kind, 3, 4, block_kernels, mix, True, _ForcedFallback({1, 2, 4}))
    with pytest.warns(RuntimeWarning, match="left the fast path"):
        res = eng.run(prompts, max_new_tokens=NEW)
    assert res.outputs == greedy and res.accepted == want.accepted
    assert res.runtime_stats["fallback"] == {"forced": 3} and len(launches) == 1


def test_a_block_draft_trails_by_default_where_it_can(tiny_target, block_kernels):
    """``draft_at_end=None`` (the default): a block draft with side streams trails the step graph; on one stream it is
    the step graph's prologue instead; the other modes launch their draft graph every step."""
    draft = DRAFT_KINDS["dflash"].create(tiny_target, seed=1)
    kw = dict(width=4, batch=1, block_size=BS, block_table_width=BT, library=block_kernels)
    assert DRAFT_KINDS["dflash"].engine(tiny_target, draft, mode="specgen", **kw).strategy.trails_draft
    one = DRAFT_KINDS["dflash"].engine(tiny_target, draft, mode="specgen", side_streams=False, **kw).strategy
    assert one.fuses_draft and not one.trails_draft
    assert not DRAFT_KINDS["dflash"].engine(tiny_target, draft, mode="compile", **kw).strategy.trails_draft


def test_draft_at_end_is_refused_for_a_chain_draft(tiny_target, block_kernels):
    head = DRAFT_KINDS["mtp"].create(tiny_target, seed=1)
    with pytest.raises(EngineError, match="cannot run at the end of the step graph"):
        DRAFT_KINDS["mtp"].engine(tiny_target, head, mode="specgen", width=4, batch=1, library=block_kernels,
                                  draft_at_end=True)  # fmt: skip
    # the other modes launch their draft graph every step whatever the switch says
    eng = DRAFT_KINDS["mtp"].engine(tiny_target, head, mode="baseline", width=4, batch=1, draft_at_end=True)
    assert not eng.strategy.trails_draft
