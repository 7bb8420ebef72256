"""SpecVerifyRuntime over a hybrid target: the linear state's slots on the fast and the eager path.

The known failure modes of other engines, each a test: a step that leaves the
fast path reads the committed slot the fast path would (vLLM #52942: a
non-speculative step read slot 0); padding rows of a bucket write no state
(vLLM #37728, #49757); a sequence whose slots are -1 writes no state.
"""

from __future__ import annotations

import contextlib
import os
import warnings

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


SOAK_STEPS = int(os.environ.get("SPECGEN_SOAK_STEPS", "10000"))


@pytest.mark.gpu
def test_cuda_hybrid_soak_replays(hybrid_kernels):
    """SOAK_STEPS captured replays of a hybrid verify step (the Triton forward writing every row's linear state by
    slot) over random batches, acceptance counts and slot maps (-1 rows too): each step's tokens equal the
    same step run eagerly, the whole state pool equals the eager run's after every chunk, no replay syncs or
    allocates, and every bucket and acceptance count occurs."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    dev, max_batch, chunk = torch.device("cuda"), 8, 500
    model = Qwen35Model.create("qwen3.5-tiny", seed=0, device=dev)
    model.allocate_kv_cache(1 + 8 * BT * max_batch, BS, block_table_width=BT)
    pool_fast = _pool(model, max_batch * W + 4 * W, seed=11)
    pool_eager = _pool(model, max_batch * W + 4 * W, seed=11)
    model.linear_state = pool_fast
    fast = SpecVerifyRuntime(
        hybrid_kernels, _forward(model), capabilities_of(model), W, max_batch=max_batch, block_table_width=BT,
        block_size=BS, backend="cuda", device=dev,
    )  # fmt: skip
    eager = SpecVerifyRuntime(
        hybrid_kernels, _forward(model), capabilities_of(model), W, max_batch=max_batch, block_table_width=BT,
        block_size=BS, backend="cuda", device=dev, allow_eager=True,
    )  # fmt: skip
    model.linear_state = pool_fast
    fast.capture_all()
    pool_fast.restore(pool_eager.snapshot())  # the capture's warm-up ran on the pool
    gen = torch.Generator().manual_seed(12)
    seen_accept, buckets, checked = torch.zeros(W, dtype=torch.long), set(), 0
    while checked < SOAK_STEPS:
        n = min(chunk, SOAK_STEPS - checked)
        cases = []
        for _ in range(n):
            batch = int(torch.randint(1, max_batch + 1, (1,), generator=gen))
            table = (1 + torch.randperm(8 * BT * max_batch, generator=gen)[: batch * BT]).to(I32).view(batch, BT)
            seq = torch.randint(0, BT * BS - W - 1, (batch,), generator=gen).to(I32)
            last = torch.randint(0, 512, (batch,), generator=gen).to(I32)
            drafts = torch.randint(0, 512, (batch, W - 1), generator=gen).to(I32)
            # counts an engine passes: the device guard trips on one outside 0..W-1 (the eager step then)
            accepted = torch.randint(0, W, (batch,), generator=gen).to(I32)
            slots = torch.randperm(max_batch + 4, generator=gen)[:batch].to(I32)[:, None] * W + torch.arange(W)
            slots[torch.rand(batch, generator=gen) < 0.05] = -1  # a sequence with no slots writes nothing
            cases.append((last, drafts, seq, table, accepted, slots.to(I32)))
            seen_accept += torch.bincount(accepted.long(), minlength=W)
        dev_cases = [tuple(t.to(dev) for t in c) for c in cases]
        kv = (model.kv_cache._k.clone(), model.kv_cache._v.clone())
        hist = torch.full((n, max_batch, W), -1, dtype=I32, device=dev)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.set_sync_debug_mode("error")
        try:
            for i, (c, host) in enumerate(zip(dev_cases, cases)):
                bounds = (int(host[2].min()), int(host[2].max()))
                res = fast.step(*c[:4], bounds, accepted=c[4], state_slots=c[5])
                hist[i, : len(host[0])].copy_(res.next_tokens)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        torch.cuda.synchronize()
        assert torch.cuda.memory_allocated() == before, "a replay allocated device memory"
        assert fast.stats()["fast_path"] == checked + n
        # the same chunk eagerly, from the same KV cache and an equal pool
        model.kv_cache._k.copy_(kv[0])
        model.kv_cache._v.copy_(kv[1])
        model.linear_state = pool_eager
        got = hist.cpu()
        with warnings.catch_warnings():  # the first eager step warns that it left the fast path
            warnings.simplefilter("ignore", RuntimeWarning)
            for i, (c, host) in enumerate(zip(dev_cases, cases)):
                res = eager.step(*c[:4], (-1, int(host[2].max())), accepted=c[4], state_slots=c[5])
                assert not res.fast_path
                assert torch.equal(got[i, : len(host[0])], res.next_tokens.cpu()), checked + i
                buckets.add(fast._bucket(len(host[0])))
        # the last eager results and the chunk's last inputs go before the next chunk counts the allocator's bytes
        res = c = None
        model.linear_state = pool_fast
        for a, b in zip(pool_fast.snapshot(), pool_eager.snapshot()):
            assert torch.equal(a[:, :-1], b[:, :-1]), f"state pools differ after step {checked + n}"
        checked += n
    assert buckets == set(fast.buckets) and (seen_accept > 0).all()
    print(
        f"hybrid soak w{W}: {SOAK_STEPS} replays exact against eager steps; pools equal after every chunk of "
        f"{chunk}; acceptance counts 0..{W - 1} histogram {seen_accept.tolist()}; buckets {sorted(buckets)}; "
        "memory_allocated unchanged"
    )
