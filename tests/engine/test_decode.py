"""The host-driven decode loops: greedy, and speculative with the MTP head or an acceptance mix."""

from __future__ import annotations

import functools

import pytest
import torch

from specgen.engine import AcceptanceMix, greedy_generate, speculative_generate
from specgen.models import MTPHead, Qwen3Model

BS = 8
NEW = 20
PROMPT_LENS = {1: (7,), 3: (1, 12, 5), 8: (5, 17, 1, 9, 30, 3, 12, 8)}


@functools.cache
def tiny() -> tuple[Qwen3Model, MTPHead]:
    model = Qwen3Model.create("tiny", seed=0)
    return model, MTPHead.create(model, seed=1)


def prompts_of(batch: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(batch)
    return [torch.randint(0, 512, (n,), generator=g).tolist() for n in PROMPT_LENS[batch]]


@functools.cache
def greedy_ref(batch: int) -> list[list[int]]:
    return greedy_generate(tiny()[0], prompts_of(batch), NEW)


def test_greedy_is_batch_independent_and_not_degenerate():
    model = tiny()[0]
    prompts = prompts_of(3)
    assert [greedy_generate(model, [p], NEW)[0] for p in prompts] == greedy_ref(3)
    assert all(len(set(out)) >= NEW // 4 for out in greedy_ref(8))  # not stuck on a token


@pytest.mark.parametrize("draft", ["mtp", "p0", "p0.5", "p1"])
@pytest.mark.parametrize("depth", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("batch", [1, 3, 8])
def test_speculative_equals_greedy(draft, depth, batch):
    model, head = tiny()
    proposer = head if draft == "mtp" else AcceptanceMix(float(draft[1:]), seed=depth)
    out, stats = speculative_generate(model, proposer, prompts_of(batch), NEW, depth, block_size=BS)
    assert out == greedy_ref(batch)
    assert sum(stats.accept_hist) > 0 and stats.drafted == depth * sum(stats.accept_hist)
    assert 0.0 <= stats.acceptance_rate <= 1.0
    if draft == "p0":
        assert stats.acceptance_rate == 0.0 and stats.steps == NEW - 1
    if draft == "p1":
        assert stats.acceptance_rate == 1.0 and stats.steps == -(-(NEW - 1) // (depth + 1))


def test_acceptance_mix_tracks_p():
    model = tiny()[0]
    rates = []
    for p in (0.2, 0.5, 0.8):
        _, stats = speculative_generate(model, AcceptanceMix(p, seed=3), prompts_of(8), 60, depth=1, block_size=BS)
        rates.append(stats.acceptance_rate)
    assert rates == sorted(rates) and abs(rates[1] - 0.5) < 0.15
