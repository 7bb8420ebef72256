"""specgen mode on one stream (``side_streams=False``, ``specgen bench --no-side-streams``): the same tokens as
greedy decoding and as the side streams' engine, no host sync per step, and nothing made beside the forward."""

from __future__ import annotations

import random

import pytest
import torch

from specgen.engine import AcceptanceMix, SpecDecodeEngine, greedy_generate
from specgen.engine.draft_kinds import DRAFT_KINDS
from specgen.models import MTPHead, Qwen3Model

BT, BS, NEW = 8, 16, 12


def _prompts(batch: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(512) for _ in range(rng.randint(1, 10))] for _ in range(batch)]


def _mtp_run(model, head, kernels, prompts, width, oracle, side_streams, timing=False, mapped_mirror=None):
    mix = AcceptanceMix(0.7, oracle, model.config.vocab_size, seed=1)
    eng = SpecDecodeEngine(
        model,
        head,
        mode="specgen",
        width=width,
        batch=len(prompts),
        block_size=BS,
        block_table_width=BT,
        library=kernels,
        acceptance=mix,
        side_streams=side_streams,
        mapped_mirror=mapped_mirror,
    )
    res = eng.run(prompts, max_new_tokens=NEW)
    syncs = [t.host_syncs for t in eng.run(prompts, steps=3, warmup_steps=1, timing=True).timings] if timing else None
    return eng, res, syncs


def test_one_stream_engine_on_the_cpu_emits_greedy_tokens(engine_kernels):
    """The switch reaches the runtime; on the CPU (no streams at all) the tokens are greedy's."""
    m = Qwen3Model.create("tiny", seed=0)
    head = MTPHead.create(m, seed=1)
    prompts = _prompts(3, 5)
    oracle = torch.tensor(greedy_generate(m, prompts, NEW + 12))
    eng, res, _ = _mtp_run(m, head, engine_kernels, prompts, 4, oracle, side_streams=False)
    assert not eng.side_streams and not eng.strategy.runtime.side_streams
    assert res.outputs == greedy_generate(m, prompts, NEW)


@pytest.mark.gpu
def test_cuda_one_stream_mtp_lossless(engine_kernels):
    """MTP at widths 3 and 5, batches 1, 3 and 8: one stream emits greedy's tokens with 0 host syncs per step, and
    the runtime made no side stream (no hoist stream, a guard in line, host copies on the step's stream)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    m = Qwen3Model.create("tiny", seed=0, device="cuda")
    head = MTPHead.create(m, seed=1)
    for width in (3, 5):
        for batch in (1, 3, 8):
            prompts = _prompts(batch, width * 10 + batch)
            oracle = torch.tensor(greedy_generate(m, prompts, NEW + 3 * width), device="cuda")
            eng, res, syncs = _mtp_run(m, head, engine_kernels, prompts, width, oracle, False, timing=True)
            assert res.outputs == greedy_generate(m, prompts, NEW), (width, batch)
            assert syncs == [0, 0, 0], (width, batch, syncs)
            rt = eng.strategy.runtime
            assert rt._hoist_stream is None and rt._guard.stream is None and rt._mirror.copy_stream is None


@pytest.mark.gpu
def test_cuda_side_streams_copied_and_mapped_host_fields_mtp_lossless(engine_kernels):
    """Side streams with the host fields copied on a copy stream (the default) and through mapped memory
    (``mapped_mirror=True``, ``specgen bench --mapped-mirror``): greedy's tokens with 0 host syncs per step at widths
    3 and 5, batches 1 and 8; the hoist and guard streams stay either way, the copy stream only when copying."""
    torch.backends.cuda.matmul.allow_tf32 = False
    m = Qwen3Model.create("tiny", seed=0, device="cuda")
    head = MTPHead.create(m, seed=1)
    for mapped in (None, True):
        for width in (3, 5):
            for batch in (1, 8):
                prompts = _prompts(batch, width * 7 + batch)
                oracle = torch.tensor(greedy_generate(m, prompts, NEW + 3 * width), device="cuda")
                eng, res, syncs = _mtp_run(m, head, engine_kernels, prompts, width, oracle, True, True, mapped)
                assert res.outputs == greedy_generate(m, prompts, NEW), (mapped, width, batch)
                assert syncs == [0, 0, 0], (mapped, width, batch, syncs)
                rt = eng.strategy.runtime
                assert rt.side_streams and rt._mirror.mapped is bool(mapped)
                assert (rt._mirror.copy_stream is None) is bool(mapped)
                assert rt._hoist_stream is not None and rt._guard.stream is not None


@pytest.mark.gpu
@pytest.mark.parametrize("kind, depth", [("dflash", 7), ("dspark", 3)])
def test_cuda_one_stream_block_drafts_match_side_streams(block_kernels, kind, depth):
    """DFlash and DSpark: one stream emits the side streams' tokens (greedy's) with 0 host syncs per step, and the
    context rows are not made on a side stream beside the forward."""
    torch.backends.cuda.matmul.allow_tf32 = False
    model = Qwen3Model.create("tiny", seed=0, device="cuda")
    draft = DRAFT_KINDS[kind].create(model, seed=1)
    prompts = _prompts(4, depth)
    outputs = {}
    for side_streams in (True, False):
        eng = DRAFT_KINDS[kind].engine(
            model,
            draft,
            mode="specgen",
            width=depth + 1,
            batch=4,
            block_size=BS,
            block_table_width=BT,
            library=block_kernels,
            side_streams=side_streams,
        )
        outputs[side_streams] = eng.run(prompts, max_new_tokens=NEW).outputs
        timed = eng.run(prompts, steps=6, warmup_steps=2, timing=True)
        assert [t.host_syncs for t in timed.timings] == [0] * 6, side_streams
        assert eng.strategy.fuses_draft == (not side_streams)  # one stream: the block forward in the step graph
        if not side_streams:
            assert eng.proposer._side is None and eng.strategy.runtime._mirror.copy_stream is None
        eng.close()
    assert outputs[False] == outputs[True] == greedy_generate(model, prompts, NEW)


@pytest.mark.parametrize("kind", ["dflash", "dspark"])
def test_one_stream_runs_the_block_forward_as_its_step_graph_s_prologue(block_kernels, kind):
    """On one stream a block draft is the runtime's prologue (the anchor carried first by one copy kernel, the
    block writing only the drafts): one step graph a step, and greedy decoding's tokens; with side streams it runs at
    the step graph's end instead and carries the anchor itself."""
    model = Qwen3Model.create("tiny", seed=0)
    draft = DRAFT_KINDS[kind].create(model, seed=1)
    prompts = _prompts(2, seed=3)
    for side_streams in (False, True):
        eng = DRAFT_KINDS[kind].engine(
            model, draft, mode="specgen", width=4, batch=2, block_size=BS, block_table_width=BT,
            library=block_kernels, side_streams=side_streams,
        )  # fmt: skip
        res = eng.run(prompts, max_new_tokens=8)
        prologue = eng.strategy.runtime.prologue
        assert res.fused_draft and eng.strategy.fuses_draft == (not side_streams) == (not eng.strategy.trails_draft)
        if side_streams:
            assert prologue is None and eng.proposer.writes == ("draft_tokens", "last_tokens", "seq_lens")
        else:
            assert prologue.writes == ("draft_tokens",) and prologue.setup_writes == ("last_tokens", "seq_lens")
        assert res.outputs == greedy_generate(model, prompts, 8), side_streams
        eng.close()
