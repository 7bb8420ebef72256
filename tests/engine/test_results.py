"""RunResult's counts: a sequence that has reached ``max_new_tokens`` drafts and accepts nothing more."""

from __future__ import annotations

import torch
from oracles.pinned_acceptance import pinned_acceptance

from specgen.engine import SpecDecodeEngine, greedy_generate
from specgen.engine.results import RunResult

W = 4


def rows(*starts: int) -> list[list[int]]:
    """One row of ``W`` next tokens per sequence."""
    return [list(range(s, s + W)) for s in starts]


def test_a_sequence_at_its_budget_adds_nothing_to_drafted_or_accepted():
    res = RunResult("baseline", W, 2, [[1], [1]])
    res.commit([3, 0], rows(10, 20), timed=True, max_new_tokens=5)  # 5 and 2 tokens
    assert (res.drafted, res.accepted, res.timed_tokens) == (2 * (W - 1), 3, 4 + 1)
    res.commit([2, 1], rows(30, 40), timed=True, max_new_tokens=5)  # the first is exactly at its budget
    assert (res.drafted, res.accepted, res.timed_tokens) == (3 * (W - 1), 3 + 1, 5 + 2)
    res.commit([3, 3], rows(50, 60), timed=False, max_new_tokens=5)  # the second still has room: 4 -> 8 tokens
    assert (res.drafted, res.accepted, res.timed_tokens) == (4 * (W - 1), 3 + 1 + 3, 7)
    res.commit([1, 1], rows(70, 80), timed=True, max_new_tokens=5)  # both past it
    assert (res.drafted, res.accepted, res.timed_tokens) == (4 * (W - 1), 7, 7)
    assert res.steps == 3 and res.acceptance == 7 / 12
    assert [len(o) for o in res.outputs] == [1 + 4 + 3 + 4 + 2, 1 + 1 + 2 + 4 + 2]  # outputs are cut by the engine


def test_without_a_budget_every_step_counts():
    res = RunResult("baseline", W, 1, [[1]])
    for a in (3, 0, 2):
        res.commit([a], rows(0), timed=True, max_new_tokens=None)
    assert (res.drafted, res.accepted, res.timed_tokens, res.steps) == (3 * (W - 1), 5, 4 + 1 + 3, 3)


def test_a_run_counts_each_sequence_until_it_reaches_its_budget(tiny):
    """Pinned acceptance: sequence 0 reaches exactly 9 tokens after two steps, sequence 1 after eight.

    The batch keeps stepping until the slower one is done; the faster one's
    six steps after its budget count neither as drafted nor as accepted.
    """
    model, head = tiny
    prompts = [[5, 9, 2], [7]]
    new = 1 + 2 * W  # the bonus token, then two fully accepted steps
    lengths = [[W - 1, W - 1] + [2] * 6, [0] * 8]
    oracle = torch.tensor(greedy_generate(model, prompts, 40))
    mix = pinned_acceptance(oracle, model.config.vocab_size, lengths, W)
    eng = SpecDecodeEngine(
        model, head, mode="baseline", width=W, batch=2, block_size=16, block_table_width=8, acceptance=mix
    )
    res = eng.run(prompts, max_new_tokens=new)
    assert res.outputs == [o[:new] for o in oracle.tolist()]
    assert res.steps == 8
    assert res.drafted == (2 + 8) * (W - 1)
    assert res.accepted == 2 * (W - 1)
    assert res.timed_tokens == 2 * new - 2  # the prefill's bonus tokens are not the steps'
