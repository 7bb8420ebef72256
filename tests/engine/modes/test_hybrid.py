"""A hybrid target (Qwen3.5-style: Gated DeltaNet + gated attention) under every mode and draft kind.

Each run must emit exactly plain greedy decoding of the hybrid (computed from
scratch per token, ``oracles.hybrid_reference``), and after every step each
sequence's committed linear state (the slot its accepted row wrote) must
equal a from-scratch recurrence over its committed tokens: a rejected row's
state is never the one read next.
"""

from __future__ import annotations

import random

import pytest
import torch
from oracles.hybrid_reference import committed_state, hybrid_greedy

from specgen.engine.acceptance import AcceptanceMix
from specgen.engine.draft_kinds import DRAFT_KINDS
from specgen.models.qwen3_5 import Qwen35Model

BT, BS, NEW = 8, 16, 10
MODES = ("baseline", "compile", "specgen")
# (kind, depth, batch, p): MTP widths 2..6 and the block drafts' widths, batches 1..8
CASES = [
    ("mtp", 1, 1, 0.9),
    ("mtp", 2, 8, 0.7),
    ("mtp", 3, 3, 0.8),
    ("mtp", 4, 2, 0.5),
    ("mtp", 5, 5, 0.9),
    ("dflash", 3, 4, 0.8),
    ("dflash", 7, 2, 0.9),
    ("dspark", 3, 3, 0.7),
    ("dspark", 7, 1, 0.9),
]


GPU_CASES = [CASES[2], CASES[5], CASES[8]]


@pytest.fixture(scope="module")
def hybrid():
    return Qwen35Model.create("qwen3.5-tiny", seed=0)


@pytest.fixture(scope="module")
def hybrid_cuda():
    return Qwen35Model.create("qwen3.5-tiny", seed=0, device="cuda")


def _prompts(batch: int, width: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    # one prompt of exactly W tokens: with every prompt that long a prefill has B * W rows, the
    # verification's row count, and must still be taken for a prefill
    return [[rng.randrange(512) for _ in range(width if b == 0 else rng.randint(1, 9))] for b in range(batch)]


class StateCheck:
    """After every step: the committed slot of every sequence holds the from-scratch state."""

    def __init__(self, model, full: list[list[int]]):
        self.model, self.full, self.checked = model, full, 0

    def before_step(self, engine, i):
        pass

    def after_step(self, engine, i):
        b = engine.bufs
        accepted, lens = b["accepted"].cpu(), b["next_seq_lens"].cpu()
        for s, n in enumerate(lens.tolist()):
            if n > len(self.full[s]):
                continue
            for layer, (want_state, want_window) in enumerate(committed_state(self.model, self.full[s][:n])):
                state, window = (t[s].cpu() for t in engine.state.committed(accepted, layer))
                torch.testing.assert_close(state, want_state.cpu(), atol=2e-5, rtol=1e-4)
                torch.testing.assert_close(window, want_window.cpu(), atol=2e-5, rtol=1e-4)
            self.checked += 1


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind, depth, batch, p", CASES, ids=[f"{k}{d}-b{b}" for k, d, b, _ in CASES])
def test_every_mode_is_greedy_and_keeps_the_committed_state(hybrid, hybrid_kernels, mode, kind, depth, batch, p):
    _run(hybrid, hybrid_kernels, mode, kind, depth, batch, p)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", (*MODES, "inductor"))
@pytest.mark.parametrize("kind, depth, batch, p", GPU_CASES, ids=[f"{k}{d}-b{b}" for k, d, b, _ in GPU_CASES])
def test_cuda_graphs_are_greedy_and_keep_the_committed_state(hybrid_cuda, hybrid_kernels, mode, kind, depth, batch, p):
    if mode == "inductor" and kind != "mtp":
        pytest.skip("inductor is the MTP plan's compiled pipeline")
    res = _run(hybrid_cuda, hybrid_kernels, mode, kind, depth, batch, p, timing=True)
    if mode == "specgen":
        assert res.timings and all(t.host_syncs == 0 for t in res.timings)


def _run(hybrid, hybrid_kernels, mode, kind, depth, batch, p, timing=False):
    width = depth + 1
    prompts = _prompts(batch, width, seed=depth * 10 + batch)
    want = hybrid_greedy(hybrid, prompts, NEW + width)
    dev = hybrid.embed_tokens.weight.device
    mix = AcceptanceMix(p, torch.tensor(want, device=dev), hybrid.config.vocab_size, seed=batch)
    k = DRAFT_KINDS[kind]
    engine = k.engine(
        hybrid,
        k.create(hybrid, seed=1),
        mode=mode,
        width=width,
        batch=batch,
        block_size=BS,
        block_table_width=BT,
        library=hybrid_kernels,
        acceptance=mix,
        compile_backend="eager" if dev.type == "cpu" else "inductor",
    )
    check = StateCheck(hybrid, [pr + w for pr, w in zip(prompts, want)])
    engine.observer = check
    res = engine.run(prompts, max_new_tokens=NEW, timing=timing)
    assert res.outputs == [w[:NEW] for w in want]
    assert check.checked > 0
    assert res.acceptance > 0  # drafts were accepted, so committed slots other than 0 were read
    if mode == "specgen":
        stats = res.runtime_stats
        assert stats["fallback"] == {} and stats["fast_path"] == res.steps
        assert any(s.startswith("spec_verify_linear_state_update") or "hybrid" in s for s in stats["graph"])
    return res
