"""A runtime prologue: work at the head of every step (an engine's draft), in the graph and on the fallback path."""

from __future__ import annotations

import pytest
import torch

from specgen.runtime.capabilities import SpeculativeVerifyCapabilities
from specgen.runtime.verify_graph import SpecVerifyRuntime

W, BT, BS, VOCAB = 4, 8, 16, 50
I32 = torch.int32
LAYOUT = {"widths": (W,), "block_table_width": BT, "block_size": BS}
CAPS = SpeculativeVerifyCapabilities(supports_in_graph_input_update=True, block_size=BS, block_table_width=BT)


@pytest.fixture(scope="module")
def lib(kernel_library):
    return kernel_library("SPECGEN_TEST_PROLOGUE_KERNELS", LAYOUT, ("draft-to-verify", "verify-to-draft"))


def model_forward(bufs):
    tokens, positions = bufs["tokens"].long(), bufs["positions"].long()
    return ((tokens * 7 + positions) % VOCAB).to(I32).view(-1, W)


class Draft:
    """A stand-in draft: writes the step's inputs from a counter, and records what it saw of the buffers."""

    def __init__(self, bufs, batch: int):
        self.bufs, self.batch, self.calls, self.seen_accepted = bufs, batch, 0, []

    def __call__(self) -> None:
        b, n = self.bufs, self.batch
        self.calls += 1
        self.seen_accepted.append(b["accepted"][:n].clone())
        k = self.calls
        b["last_tokens"][:n].copy_(torch.arange(n, dtype=I32) * 3 + k)
        b["draft_tokens"][:n].copy_((torch.arange(n * (W - 1), dtype=I32).view(n, W - 1) + k) % VOCAB)
        b["seq_lens"][:n].copy_(torch.arange(n, dtype=I32) + 10 * k)


def _runtime(lib, batch: int):
    holder = {}
    rt = SpecVerifyRuntime(lib, model_forward, CAPS, W, max_batch=8, prologue=lambda: holder["draft"]())
    bufs = rt.buffers(batch)
    bufs["block_table"][:batch].copy_(torch.arange(1, 1 + batch * BT, dtype=I32).view(batch, BT))
    holder["draft"] = Draft(bufs, batch)
    return rt, bufs, holder["draft"]


def test_prologue_writes_the_inputs_each_step_reads(lib):
    """Each step runs the prologue once, before the head: its outputs are what the step verifies."""
    plain = SpecVerifyRuntime(lib, model_forward, CAPS, W, max_batch=8)
    rt, bufs, draft = _runtime(lib, 5)
    accepted = []
    for step in range(1, 4):
        res = rt.step_in_place(5, (10 * step, 10 * step + 4))
        assert res.fast_path and draft.calls == step
        expected = plain.step(
            bufs["last_tokens"][:5].clone(),
            bufs["draft_tokens"][:5].clone(),
            bufs["seq_lens"][:5].clone(),
            bufs["block_table"][:5].clone(),
            (10 * step, 10 * step + 4),
        )
        for name in ("accepted", "next_tokens", "next_seq_lens", "draft_slots"):
            assert torch.equal(getattr(res, name), getattr(expected, name)), name
        # the verify rows hold this step's drafts: the prologue ran before the token update
        assert torch.equal(bufs["tokens"][: 5 * W].view(5, W)[:, 1:], bufs["draft_tokens"][:5])
        accepted.append(res.accepted.clone())
    # each prologue saw the previous step's acceptance: it runs before its own step's tail
    for k in (1, 2):
        assert torch.equal(draft.seen_accepted[k], accepted[k - 1])


def test_fallback_runs_the_prologue_first(lib):
    """A guard failure runs the step eagerly; the prologue still runs once, before the step reads its inputs."""
    rt, bufs, draft = _runtime(lib, 3)
    res = rt.step_in_place(3, (0, 10_000))  # bounds past the block table: the guard fails
    assert res.reason == "guard_failed" and draft.calls == 1
    assert torch.equal(bufs["seq_lens"][:3], torch.arange(3, dtype=I32) + 10)
    assert torch.equal(bufs["next_seq_lens"][:3], bufs["seq_lens"][:3] + res.accepted + 1)
    assert torch.equal(bufs["tokens"][: 3 * W].view(3, W)[:, 0], bufs["last_tokens"][:3])


def test_step_with_a_prologue_is_refused(lib):
    rt, bufs, draft = _runtime(lib, 2)
    with pytest.raises(ValueError, match="step_in_place"):
        rt.step(bufs["last_tokens"][:2], bufs["draft_tokens"][:2], bufs["seq_lens"][:2], bufs["block_table"][:2])
    assert draft.calls == 0


def test_the_head_work_the_draft_does_not_read_runs_beside_it(lib):
    """With a prologue that writes only the drafts, the metadata and tiling updates are hoisted: they have run
    when the draft runs (here, in order on the CPU), and the step's results are the plain runtime's."""
    from specgen.runtime.verify_graph import Prologue

    plain = SpecVerifyRuntime(lib, model_forward, CAPS, W, max_batch=8)
    seen = {}

    def carry():
        bufs["last_tokens"][:4].copy_(bufs["next_last_token"][:4])
        bufs["seq_lens"][:4].copy_(bufs["next_seq_lens"][:4])

    def draft():
        seen["positions"] = bufs["positions"][: 4 * W].clone()
        seen["seq_lens"] = bufs["seq_lens"][:4].clone()
        bufs["draft_tokens"][:4].copy_((bufs["draft_tokens"][:4] * 5 + 3) % VOCAB)

    rt = SpecVerifyRuntime(
        lib, model_forward, CAPS, W, max_batch=4, prologue=Prologue(draft, writes=("draft_tokens",), setup=carry)
    )
    assert [s.variant.family for s in rt.hoisted] == [
        "spec_verify_metadata_update",
        "spec_verify_attention_tiling_update",
    ]
    bufs = rt.buffers(4)
    bufs["block_table"].copy_(torch.arange(1, 1 + 4 * BT, dtype=I32).view(4, BT))
    bufs["next_seq_lens"].copy_(torch.tensor([3, 0, 17, 40], dtype=I32))
    bufs["next_last_token"].copy_(torch.tensor([1, 2, 3, 4], dtype=I32))
    for step in range(3):
        res = rt.step_in_place(4, (0, 60))
        assert res.fast_path
        s = seen["seq_lens"]
        assert torch.equal(seen["positions"].view(4, W), s[:, None] + torch.arange(W, dtype=I32))
        expected = plain.step(
            bufs["last_tokens"].clone(), bufs["draft_tokens"].clone(), s, bufs["block_table"].clone(), (0, 60)
        )
        for name in ("accepted", "next_tokens", "next_seq_lens", "draft_slots", "hidden_rows"):
            assert torch.equal(getattr(res, name), getattr(expected, name)), (step, name)
        assert torch.equal(bufs["row_kv_lens"][: 4 * W].view(4, W), s[:, None] + torch.arange(1, W + 1, dtype=I32))


def test_a_setup_the_draft_does_not_touch_runs_beside_it():
    """``setup_beside``: the setup moves to the side stream only when the run neither reads nor writes what it
    writes; the default (every step input) never moves."""
    from specgen.runtime.verify_graph import Prologue

    noop = lambda: None  # noqa: E731
    carry = ("last_tokens", "seq_lens")
    mtp_like = Prologue(noop, writes=("draft_tokens",), reads=("next_seq_lens", "next_last_token"), setup=noop)
    assert not mtp_like.setup_beside  # setup_writes defaults to every input
    assert Prologue(noop, ("draft_tokens",), ("next_seq_lens",), noop, setup_writes=carry).setup_beside
    assert not Prologue(noop, ("draft_tokens",), ("seq_lens",), noop, setup_writes=carry).setup_beside
    assert not Prologue(noop, ("draft_tokens", "last_tokens"), (), noop, setup_writes=carry).setup_beside
    assert not Prologue(noop, ("draft_tokens",), (), None, setup_writes=carry).setup_beside


def test_the_mtp_draft_carries_beside_itself():
    """The MTP chain's carry writes what its run never reads, so specgen runs the carry beside the draft."""
    from specgen.engine.proposers.mtp import MTPProposer
    from specgen.runtime.verify_graph import Prologue

    p = Prologue(lambda: None, ("draft_tokens",), MTPProposer.READS, lambda: None, MTPProposer.carry_writes)
    assert p.setup_beside
    assert not set(MTPProposer.carry_writes) & set(MTPProposer.SAMPLING_READS)
