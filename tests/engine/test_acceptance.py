"""The acceptance mix: one set of seeded tables, read the same way by both decode loops."""

from __future__ import annotations

import pytest
import torch

from specgen.engine import AcceptanceMix
from specgen.models import EngineError

ORACLE = torch.arange(2 * 12).view(2, 12) * 7 % 50
VOCAB = 50


def test_engine_and_host_loop_read_the_same_tables():
    mix = AcceptanceMix(0.5, ORACLE, VOCAB, seed=3)
    prompt_lens, generated = torch.tensor([4, 7]), torch.tensor([2, 5])
    drafts = torch.zeros(2, 3, dtype=torch.int32)
    applied = mix.apply(drafts, prompt_lens + generated - 1, prompt_lens)  # S' = P + n - 1
    assert applied.dtype == torch.int32
    assert applied.tolist() == mix.propose(generated, 3).tolist()
    assert mix.propose(torch.tensor([11, 30]), 2).shape == (2, 2)  # past the oracle: clamped, fixed shape


@pytest.mark.parametrize("p", [0.0, 1.0])
def test_p_zero_never_and_p_one_always_hits(p):
    got = AcceptanceMix(p, ORACLE, VOCAB, seed=1).propose(torch.tensor([0, 0]), 12)
    hits = got == ORACLE
    assert bool(hits.all()) if p == 1.0 else not bool(hits.any())
    assert bool(((got >= 0) & (got < VOCAB)).all())


def test_binding_an_oracle_keeps_p_and_seed():
    mix = AcceptanceMix(0.3, seed=9)
    assert not mix.covers(2, 4)
    bound = mix.bound(ORACLE, VOCAB)
    assert bound.covers(2, 12) and not bound.covers(2, 13) and not bound.covers(3, 4)
    assert torch.equal(bound.hit, AcceptanceMix(0.3, ORACLE, VOCAB, seed=9).hit)


def test_bad_p_and_missing_vocabulary():
    with pytest.raises(EngineError, match=r"\[0, 1\]"):
        AcceptanceMix(-0.1)
    with pytest.raises(EngineError, match="vocabulary"):
        AcceptanceMix(0.5, ORACLE)
