"""RankCheck without processes: two ranks' step states hashed and compared through a stand-in group.

Rank 0 checks first through a group that records what it all-gathers; rank
1 then checks through a group whose all-gather returns rank 0's hashes above
its own, which is what ``TensorParallel.all_gather`` hands both ranks.  A
state that differs in any one field, the target's hidden states the draft
reads included, is refused naming that field.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from specgen.engine.rank_check import RankCheck, RankMismatch
from specgen.runtime.buffers import alloc_step_buffers

B, W, BT, BS, HIDDEN = 3, 4, 8, 16, 32


class Recorder:
    """Rank 0's view of a two-rank group, recording the hashes it contributes."""

    device = torch.device("cpu")

    def __init__(self):
        self.sent = None

    def all_gather(self, t: torch.Tensor) -> torch.Tensor:
        self.sent = t.clone()
        return torch.stack([t, t])


class Peer:
    """Rank 1's view: rank 0's recorded hashes, then its own."""

    device = torch.device("cpu")

    def __init__(self, rank0: torch.Tensor):
        self.rank0 = rank0

    def all_gather(self, t: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.rank0, t])


def make_engine(seed: int = 0):
    """What the check reads of an engine: its mode, the step buffers and the verify hidden states."""
    gen = torch.Generator().manual_seed(seed)
    bufs = alloc_step_buffers(B, W, BT, block_size=BS, scratch_block=0)
    for t in bufs.values():
        t.copy_(torch.randint(0, 100, t.shape, generator=gen, dtype=t.dtype))
    hidden = torch.randn(B * W, HIDDEN, generator=gen)
    return SimpleNamespace(mode="specgen", bufs=bufs, verify_hidden=hidden)


def outputs() -> list[list[int]]:
    return [[7, 8, 9], [1], [4, 5]]


def fields() -> list[str]:
    """Every field the state holds: the committed tokens, each step buffer, the verify hidden states."""
    return ["outputs", *sorted(make_engine().bufs), "verify_hidden"]


def check_pair(engine1, outputs1) -> RankCheck:
    """Rank 0 (the unchanged state) checks, then rank 1 with ``engine1`` and ``outputs1``; rank 1's check."""
    recorder = Recorder()
    RankCheck(recorder, 1)(make_engine(), 0, outputs())
    rank1 = RankCheck(Peer(recorder.sent), 1)
    rank1(engine1, 0, outputs1)
    return rank1


def test_equal_states_pass():
    assert check_pair(make_engine(), outputs()).checks == 1


def test_hidden_states_that_differ_are_named():
    eng = make_engine()
    eng.verify_hidden[5, 3] += 1e-3  # only the hidden states the next draft reads differ
    with pytest.raises(RankMismatch, match=r"field 'verify_hidden' differs \(first of 1 differing fields"):
        check_pair(eng, outputs())


@pytest.mark.parametrize("field", fields())
def test_any_one_differing_field_is_named(field):
    eng, outs = make_engine(), outputs()
    if field == "outputs":
        outs[1].append(3)
    elif field == "verify_hidden":
        eng.verify_hidden[0, 0] = -eng.verify_hidden[0, 0] - 1
    else:
        eng.bufs[field].view(-1)[-1] += 1
    with pytest.raises(RankMismatch, match=rf"field '{field}' differs \(first of 1 differing fields"):
        check_pair(eng, outs)


def test_only_every_nth_step_is_checked():
    check = RankCheck(Recorder(), 2)
    for step in range(5):
        check(make_engine(), step, outputs())
    assert check.checks == 2  # after steps 1 and 3
