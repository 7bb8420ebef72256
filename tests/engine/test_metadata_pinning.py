"""Every metadata buffer of the captured verify graph, step by step, against the semantics.

Decoding stays lossless whatever the draft side does, so a wrong ``kv_lens``,
tiling field or scratch condition only lowers acceptance.  Here the
acceptance control pins each step's accepted count (``pinned_acceptance``),
so the host knows every step's state without reading the device: the length
``S``, the committed token, the drafts and the target's choices (the greedy
oracle).  After each step every buffer the graph reads or writes must equal
the families' torch semantics (``runtime/semantics.py``) over that state.
"""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracles.pinned_acceptance import pinned_acceptance, pinned_starts

from specgen.engine import SpecDecodeEngine, greedy_generate
from specgen.models.errors import EngineError
from specgen.runtime import semantics
from specgen.runtime.buffers import alloc_step_buffers

BT, BS = 8, 16  # the engine_kernels layout (tests/conftest.py)
CAP = BT * BS
I32 = torch.int32
# the draft graph writes these from the step before; they are checked as this step's inputs
CHECKED = (
    "last_tokens",
    "draft_tokens",
    "seq_lens",
    "block_table",
    "scratch_slot",
    "tokens",
    "positions",
    "slot_mapping",
    "kv_lens",
    "query_start_loc",
    "row_kv_lens",
    "row_num_blocks",
    "row_last_block_len",
    "row_block_offsets",
    "max_kv_len",
    "kv_split_len",
    "accepted",
    "next_tokens",
    "next_last_token",
    "next_seq_lens",
    "draft_positions",
    "draft_slots",
    "hidden_rows",
)


class PinnedCheck:
    """An engine observer: after step ``i`` compares the step buffers with the semantics of the host's state."""

    def __init__(self, prompts, lengths, oracle, mix, width):
        self.P = [len(p) for p in prompts]
        self.lengths, self.oracle, self.mix, self.width = lengths, oracle, mix, width
        self.starts = pinned_starts(lengths)
        self.checked = 0

    def before_step(self, e, i):
        pass

    def expected(self, e, i) -> dict[str, torch.Tensor]:
        B, W = e.batch, self.width
        S = torch.tensor([P + g - 1 for P, g in zip(self.P, (s[i] for s in self.starts))])  # t_0 at g - 1
        gen0 = S - torch.tensor(self.P)  # generated index of position S
        ns = e.strategy.runtime.num_splits
        x = alloc_step_buffers(B, W, BT, block_size=BS, scratch_block=e.scratch_block, num_splits=ns)
        x["last_tokens"].copy_(self.oracle.gather(1, gen0[:, None])[:, 0])
        x["draft_tokens"].copy_(self.mix.propose(gen0 + 1, W - 1))
        x["seq_lens"].copy_(S)
        x["block_table"].copy_(e.block_table)
        x["target_tokens"].copy_(self.oracle.gather(1, gen0[:, None] + 1 + torch.arange(W)))
        semantics.run_semantics("spec_verify_head_update", x, block_size=BS, num_splits=ns)
        semantics.run_semantics("greedy_prefix_verify", x, block_size=BS)
        semantics.run_semantics("prepare_next_draft", x, block_size=BS)
        return x

    def after_step(self, e, i):
        x = self.expected(e, i)
        pinned = [row[i] for row in self.lengths]
        assert x["accepted"].tolist() == pinned  # the oracle and the pinned tables agree
        for name in CHECKED:
            got = e.bufs[name].view(-1)[: x[name].numel()].view(x[name].shape)
            assert torch.equal(got, x[name]), f"step {i}: {name} = {got.tolist()}, semantics {x[name].tolist()}"
        # the target's choices are the oracle's up to the bonus (later rows follow rejected drafts)
        upto = torch.arange(self.width)[None, :] <= torch.tensor(pinned)[:, None]
        assert torch.equal(e.bufs["target_tokens"][upto], x["target_tokens"][upto]), f"step {i}: target_tokens"
        self.checked += 1


def _prompts(batch, seed):
    rng = random.Random(seed)
    return [[rng.randrange(512) for _ in range(rng.randint(1, 10))] for _ in range(batch)]


_ORACLE: dict = {}


def run_pinned(model, head, lib, width, lengths, prompt_seed):
    batch, steps = len(lengths), len(lengths[0])
    prompts = _prompts(batch, prompt_seed)
    key = (batch, prompt_seed)
    if key not in _ORACLE:
        _ORACLE[key] = torch.tensor(greedy_generate(model, prompts, CAP))
    oracle = _ORACLE[key]
    mix = pinned_acceptance(oracle, model.config.vocab_size, lengths, width)
    eng = SpecDecodeEngine(
        model,
        head,
        mode="specgen",
        width=width,
        batch=batch,
        block_size=BS,
        block_table_width=BT,
        library=lib,
        acceptance=mix,
    )
    check = PinnedCheck(prompts, lengths, oracle, mix, width)
    eng.observer = check
    res = eng.run(prompts, steps=steps)
    assert check.checked == steps
    assert res.runtime_stats["fallback"] == {} and res.runtime_stats["fast_path"] == steps
    assert res.outputs == [o[: len(r)] for o, r in zip(oracle.tolist(), res.outputs)]  # lossless all along
    return res


@st.composite
def pinned_runs(draw):
    width = draw(st.sampled_from([2, 3, 4, 5, 6]))
    batch = draw(st.integers(1, 4))
    steps = (CAP - 11) // width - 3  # what the table holds for a 10-token prompt
    steps = draw(st.integers(1, min(steps, 16)))
    a = st.integers(0, width - 1)
    lengths = draw(st.lists(st.lists(a, min_size=steps, max_size=steps), min_size=batch, max_size=batch))
    return width, lengths, draw(st.integers(0, 3))


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(run=pinned_runs())
def test_every_buffer_matches_the_semantics_with_pinned_acceptance(tiny, engine_kernels, run):
    width, lengths, prompt_seed = run
    res = run_pinned(*tiny, engine_kernels, width, lengths, prompt_seed)
    assert res.drafted and res.accepted == sum(map(sum, lengths))


@pytest.mark.parametrize("width", [2, 4, 6])
def test_scratch_and_full_acceptance_alternate(tiny, engine_kernels, width):
    """All accepted (the repair row writes slot(N - 1)) next to none accepted (it writes the scratch slot)."""
    top = width - 1
    lengths = [[top, 0, top, top, 0, 1], [0, top, 0, 1, top, 0], [1, 1, top, 0, 0, top]]
    run_pinned(*tiny, engine_kernels, width, lengths, prompt_seed=1)


def test_pinned_lengths_are_checked():
    oracle = torch.zeros(1, 10, dtype=torch.long)
    with pytest.raises(EngineError, match=r"0\.\.3"):
        pinned_acceptance(oracle, 512, [[4]], width=4)
    with pytest.raises(EngineError, match="oracle holds 10"):
        pinned_acceptance(oracle, 512, [[3, 3, 3]], width=4)
    mix = pinned_acceptance(oracle, 512, [[2, 0, 1]], width=4)
    assert mix.hit[0].tolist() == [False, True, True, False, False, True, False, False, False, False]
