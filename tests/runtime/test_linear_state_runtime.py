"""SpecVerifyRuntime over a hybrid target: the linear state's slots on the fast and the eager path.

The known failure modes of other engines, each a test: a step that leaves the
fast path reads the committed slot the fast path would (vLLM #52942: a
non-speculative step read slot 0); padding rows of a bucket write no state
(vLLM #37728, #49757); a sequence whose slots are -1 writes no state.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from specgen.models.qwen3_5 import Qwen35Model
from specgen.runtime import SpecVerifyRuntime, capabilities_of

W, BT, BS = 4, 8, 16
I32 = torch.int32


@pytest.fixture(scope="module")
def model():
    m = Qwen35Model.create("qwen3.5-tiny", seed=0)
    m.allocate_kv_cache(1 + 8 * BT, BS, block_table_width=BT)
    return m


def _forward(model):
    def forward(bufs):
        _, logits = model(
            bufs["tokens"],
            bufs["positions"],
            bufs["slot_mapping"],
            bufs["block_table"],
            bufs["kv_lens"],
            bufs["query_start_loc"],
            W,
            state_read=bufs["state_read_slot"],
            state_write=bufs["state_write_slots"],
        )
        return logits.argmax(-1).to(I32).view(-1, W)

    return forward


def _inputs(batch, seed):
    g = torch.Generator().manual_seed(seed)
    table = (1 + torch.randperm(8 * BT, generator=g)[: batch * BT]).to(I32).view(batch, BT)
    seq = torch.randint(0, 60, (batch,), generator=g).to(I32)
    last = torch.randint(0, 512, (batch,), generator=g).to(I32)
    drafts = torch.randint(0, 512, (batch, W - 1), generator=g).to(I32)
    accepted = torch.randint(-2, W + 2, (batch,), generator=g).to(I32)  # counts outside 0..W-1 too
    slots = torch.arange(batch * W, dtype=I32).view(batch, W)
    return last, drafts, seq, table, accepted, slots


def _pool(model, slots: int, seed: int):
    pool = model.allocate_linear_state(slots)
    g = torch.Generator().manual_seed(seed)
    pool.restore(tuple(torch.randn(t.shape, generator=g).to(t.dtype) for t in pool.snapshot()))
    return pool


def _runtime(model, lib, batch):
    return SpecVerifyRuntime(
        lib, _forward(model), capabilities_of(model), W, max_batch=batch, block_table_width=BT, block_size=BS
    )


def test_fast_and_eager_steps_read_the_same_committed_slot(model, hybrid_kernels):
    batch = 3
    last, drafts, seq, table, accepted, slots = _inputs(batch, seed=1)
    results = []
    for bounds in ((int(seq.min()), int(seq.max())), (-1, int(seq.max()))):  # (-1, ...) fails a guard: eager
        pool = _pool(model, batch * W, seed=2)
        rt = _runtime(model, hybrid_kernels, batch)
        with pytest.warns(RuntimeWarning) if bounds[0] < 0 else contextlib.nullcontext():
            res = rt.step(last, drafts, seq, table, bounds, accepted=accepted, state_slots=slots)
        results.append((res.fast_path, res.next_tokens.clone(), pool.snapshot()))
    (fast, tokens_fast, pool_fast), (eager, tokens_eager, pool_eager) = results
    assert fast and not eager
    assert torch.equal(tokens_fast, tokens_eager)
    assert all(torch.equal(a, b) for a, b in zip(pool_fast, pool_eager))


def test_padding_rows_and_minus_one_slots_write_no_state(model, hybrid_kernels):
    """Batch 3 in a bucket of 4 (one padding row); sequence 1's slots are -1: only sequences 0 and 2 write,
    each into its own W slots, and what they compute is what they compute alone."""
    last, drafts, seq, table, accepted, slots = _inputs(3, seed=4)
    slots = slots.clone()
    slots[1] = -1
    spare = 4 * W  # slots nobody owns: where a padding row or a -1 would land if it wrote
    pool = _pool(model, 3 * W + spare, seed=5)
    before = pool.snapshot()
    rt = _runtime(model, hybrid_kernels, 4)
    res = rt.step(last, drafts, seq, table, (int(seq.min()), int(seq.max())), accepted=accepted, state_slots=slots)
    assert res.fast_path
    bufs = rt.buffers(3)
    assert bufs["state_write_slots"][W : 2 * W].tolist() == [-1] * W and int(bufs["state_read_slot"][1]) == -1
    bucket = rt._bufs[4]
    assert bucket["state_write_slots"][3 * W :].tolist() == [-1] * W and int(bucket["state_read_slot"][3]) == -1
    after = pool.snapshot()
    for old, new in zip(before, after):
        # [layers, slots]: the pool's own scratch slot past the last, where -1 writes land, is no one's
        changed = (old != new).flatten(2).any(-1)[:, :-1]
        owned = torch.zeros(changed.shape[1], dtype=torch.bool)
        owned[0:W] = owned[2 * W : 3 * W] = True
        assert not bool(changed[:, ~owned].any()), "a slot outside sequences 0 and 2 changed"
    # sequence 2 alone (batch 1) writes the same states
    pool_alone = _pool(model, 3 * W + spare, seed=5)
    rt1 = _runtime(model, hybrid_kernels, 1)
    rt1.step(
        last[2:],
        drafts[2:],
        seq[2:],
        table[2:],
        (int(seq[2]), int(seq[2])),
        accepted=accepted[2:],
        state_slots=slots[2:],
    )
    for a, b in zip(after, pool_alone.snapshot()):
        torch.testing.assert_close(a[:, 2 * W : 3 * W], b[:, 2 * W : 3 * W], atol=1e-5, rtol=1e-5)


def test_a_hybrid_step_needs_its_slots(model, hybrid_kernels):
    last, drafts, seq, table, accepted, slots = _inputs(2, seed=6)
    rt = _runtime(model, hybrid_kernels, 2)
    with pytest.raises(ValueError, match="needs accepted"):
        rt.step(last, drafts, seq, table, (0, 60))
    with pytest.raises(ValueError, match=r"state_slots\[2, 4\]"):
        rt.step(last, drafts, seq, table, (0, 60), accepted=accepted, state_slots=slots[:, :2])
