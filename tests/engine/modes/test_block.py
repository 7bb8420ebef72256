"""Block drafts end to end: every mode emits plain greedy tokens; the draft-kind registry; width contracts."""

from __future__ import annotations

import random

import pytest
import torch

from specgen.engine import MODES, SpecDecodeEngine, greedy_generate
from specgen.engine.acceptance import AcceptanceMix
from specgen.engine.draft_kinds import DRAFT_KINDS, DraftKind, draft_kind, register_draft_kind
from specgen.engine.modes import SpecgenMode
from specgen.engine.proposers import BlockProposer
from specgen.models import Qwen3Model
from specgen.models.errors import EngineError

BLOCK_MODES = list(DRAFT_KINDS["dflash"].modes)

BT, BS, NEW = 8, 16, 18
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
# (kind, depth, batch): every depth the issue names, batches 1..8 spread over them
CASES = [
    ("dflash", 3, 1),
    ("dflash", 3, 6),
    ("dflash", 7, 8),
    ("dflash", 15, 3),
    ("dspark", 3, 2),
    ("dspark", 3, 7),
    ("dspark", 7, 4),
    ("dspark", 7, 5),
]


def _prompts(batch: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(512) for _ in range(rng.randint(1, 10))] for _ in range(batch)]


def test_draft_kinds_are_registered_pieces():
    assert list(DRAFT_KINDS) == ["mtp", "dflash", "dspark"]
    assert DRAFT_KINDS["mtp"].modes == MODES
    # a block draft runs every MTP mode but inductor (the compiled-semantics pipeline is the MTP plan's)
    assert BLOCK_MODES == [m for m in MODES if m != "inductor"]
    assert DRAFT_KINDS["dspark"].modes == DRAFT_KINDS["dflash"].modes
    # what a kind supports is asked of it, never read off its name
    assert [k.supports_tp for k in DRAFT_KINDS.values()] == [True, True, True]
    assert [k.loads_weights for k in DRAFT_KINDS.values()] == [False, True, True]
    assert DRAFT_KINDS["mtp"].boundaries == ("draft-to-verify", "verify-to-draft")
    assert DRAFT_KINDS["dflash"].boundaries == ("draft-to-verify", "context-kv")
    with pytest.raises(EngineError, match="unknown draft kind 'eagle'"):
        draft_kind("eagle")
    with pytest.raises(EngineError, match="taken"):
        register_draft_kind(type("Again", (DraftKind,), {"name": "dflash"}))


def test_draft_width_and_verify_width_differ_for_dspark_only(tiny_target):
    """--depth K: K drafts and a verification of K + 1 rows for every kind; the draft forward has
    K + 1 rows for DFlash and K for DSpark (anchor-row sampling)."""
    for k in (1, 3, 7, 15):
        assert DRAFT_KINDS["dflash"].draft_rows(k) == k + 1
        assert DRAFT_KINDS["dspark"].draft_rows(k) == k
    for name, rows in (("dflash", 4), ("dspark", 3)):
        draft = DRAFT_KINDS[name].create(tiny_target, seed=1)
        eng = DRAFT_KINDS[name].engine(
            tiny_target, draft, mode="baseline", width=4, batch=2, block_size=BS, block_table_width=BT
        )
        assert type(eng) is SpecDecodeEngine and isinstance(eng.proposer, BlockProposer)
        assert eng.draft_rows == rows and eng.width == 4
        seen = []
        forward = draft.forward
        draft.forward = lambda *a, **kw: seen.append(a[-1]) or forward(*a, **kw)  # record the rows argument
        try:
            res = eng.run(_prompts(2, 3), steps=2)
        finally:
            del draft.forward
        assert set(seen) == {rows} and all(len(o) >= 3 for o in res.outputs)
        assert eng.bufs["draft_tokens"].shape == (2, 3) and eng.bufs["target_tokens"].shape == (2, 4)


def test_a_block_wider_than_the_kv_layout_is_refused(tiny_target):
    draft = DRAFT_KINDS["dflash"].create(tiny_target, seed=1)
    with pytest.raises(EngineError, match="wider than the KV layout"):
        DRAFT_KINDS["dflash"].engine(
            tiny_target, draft, mode="baseline", width=16, batch=1, block_size=4, block_table_width=2
        )


def test_specgen_mode_names_the_build_command(tiny_target, block_kernels):
    """A depth the build has no plans for: the error names the specgen build command that makes them."""
    draft = DRAFT_KINDS["dspark"].create(tiny_target, seed=1)
    eng = DRAFT_KINDS["dspark"].engine(
        tiny_target, draft, mode="specgen", width=5, batch=1, block_size=BS, block_table_width=BT, library=block_kernels
    )
    with pytest.raises(EngineError, match="specgen build --boundary draft-to-verify,context-kv --widths 5 "):
        eng.run([[1, 2, 3]], steps=1)


def _check_lossless(model, kernels, kind, depth, batch, device, compile_backend):
    prompts = _prompts(batch, seed=depth * 10 + batch)
    greedy = greedy_generate(model, prompts, NEW)
    horizon = NEW + 3 * (depth + 1) + 1
    oracle = torch.tensor(greedy_generate(model, prompts, horizon), device=device)
    draft = DRAFT_KINDS[kind].create(model, seed=1)
    for p in (None, 0.7):
        mix = AcceptanceMix(p, oracle, model.config.vocab_size, seed=batch) if p is not None else None
        accepted = set()
        for mode in BLOCK_MODES:
            eng = DRAFT_KINDS[kind].engine(
                model,
                draft,
                mode=mode,
                width=depth + 1,
                batch=batch,
                block_size=BS,
                block_table_width=BT,
                library=kernels,
                acceptance=mix,
                compile_backend=compile_backend,
            )
            res = eng.run(prompts, max_new_tokens=NEW)
            assert res.outputs == greedy, (kind, depth, batch, mode, p)
            if mode == "specgen":
                assert res.runtime_stats["fast_path"] > 0 and res.runtime_stats["fallback"] == {}
            accepted.add(res.accepted)
            eng.close()
        assert len(accepted) == 1  # every mode accepted the same drafts
        if p is not None:
            assert accepted.pop() > 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind,depth,batch", CASES)
def test_every_mode_emits_greedy_tokens(block_kernels, kind, depth, batch, device):
    torch.backends.cuda.matmul.allow_tf32 = False
    model = Qwen3Model.create("tiny", seed=0, device=device)
    backend = "eager" if device == "cpu" else "inductor"
    _check_lossless(model, block_kernels, kind, depth, batch, device, backend)


@pytest.mark.gpu
def test_cuda_specgen_step_has_no_host_sync(block_kernels):
    """On CUDA the specgen step is captured and reads back a step late: 0 host syncs per timed step."""
    model = Qwen3Model.create("tiny", seed=0, device="cuda")
    for kind in ("dflash", "dspark"):
        draft = DRAFT_KINDS[kind].create(model, seed=1)
        eng = DRAFT_KINDS[kind].engine(
            model, draft, mode="specgen", width=8, batch=4, block_size=BS, block_table_width=BT, library=block_kernels
        )
        assert type(eng.strategy) is SpecgenMode and eng.strategy.lagged and not eng.strategy.fuses_draft
        assert eng.strategy.trails_draft  # the default: the block forward at the step graph's end
        res = eng.run(_prompts(4, 1), steps=6, warmup_steps=2, timing=True)
        assert [t.host_syncs for t in res.timings] == [0] * 6
