"""The serving scheduler over random workloads with a fake runner: nothing lost, nothing shared, outputs exact."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, event, given, settings, target
from hypothesis import strategies as st
from oracles.scheduler_model import VOCAB, fitted_blocks, greedy, next_token, workloads

from specgen.engine.serving import (
    BlockPool,
    ClosedLoop,
    FinishReason,
    LengthDist,
    Request,
    RequestState,
    Scheduler,
    Workload,
)


def simulate(reqs, *, num_blocks, block_size, width, max_batch, budget, seed, lag=0, closed=None):
    """Run ``reqs`` to completion with a fake runner, checking the scheduler's invariants after every step.

    ``lag`` > 0: steps complete on the "device" up to ``lag`` steps late (``auto_retire`` off).
    ``closed``: a ``ClosedLoop`` whose ``on_finish`` feeds new requests.
    """
    rng = random.Random(seed)
    pool = BlockPool(num_blocks, block_size)
    sched = Scheduler(pool, width, max_batch, budget, auto_retire=lag == 0)
    for r in reqs:
        sched.add(r)
    added = {r.id for r in reqs}
    last_step, free_after, completed, finished_seen = {}, {}, -1, set()
    prev_tables, prefilling = {}, {}  # prefilling: the next chunk's start, per request
    for _ in range(20_000):
        if sched.done:
            break
        now = sched.step * 0.05
        out = sched.schedule(now)
        tables = pool.tables()
        # blocks never shared, the scratch block never handed out
        owned = [b for t in tables.values() for b in t]
        assert len(owned) == len(set(owned))
        assert pool.scratch not in owned
        # blocks of preempted requests may be reused only after their last step completed
        for rid in out.preempted:
            assert rid not in tables and sched.requests[rid].state is RequestState.PREEMPTED
            for b in prev_tables.get(rid, ()):
                free_after[b] = last_step.get(rid, -1)
        for rid, t in tables.items():
            for b in set(t) - set(prev_tables.get(rid, ())):
                assert free_after.pop(b, -1) <= completed, f"block {b} reassigned while a step may write it"
        # the batch, the prefill budget, the table sizes
        assert len(out.ids) == len(set(out.ids)) <= max_batch and len(sched.running) <= max_batch
        assert out.prefill_tokens <= budget
        for rid in out.preempted:
            prefilling.pop(rid, None)
        for rid in out.verify:
            assert prefilling.pop(rid, None) in (None, sched.requests[rid].length - 1)
            assert len(tables[rid]) * block_size >= sched.requests[rid].length + width
        for c in out.prefill:  # contiguous chunks from 0 over the whole prefix, again after a preemption
            assert c.start == (0 if c.id not in prefilling or c.id in out.preempted else prefilling[c.id])
            prefilling[c.id] = c.start + len(c.tokens)
            assert c.last == (prefilling[c.id] == sched.requests[c.id].length)
            assert len(tables[c.id]) * block_size >= c.start + len(c.tokens)
            assert c.tokens == sched.requests[c.id].prefix[c.start : c.start + len(c.tokens)]
        for rid in out.ids:
            last_step[rid] = out.step
        # the fake runner: a prefill's last chunk yields a token, a verify step 1..width (accepted + bonus)
        produced = {}
        for c in out.prefill:
            if c.last:
                produced[c.id] = [next_token(sched.requests[c.id].prefix)]
        for rid in out.verify:
            seq, toks = sched.requests[rid].prefix, []
            for _ in range(rng.randint(1, width)):
                toks.append(next_token(seq))
                seq += (toks[-1],)
            produced[rid] = toks
        sched.update(out, produced)
        for r in sched.finished:
            if r.id not in finished_seen:
                finished_seen.add(r.id)
                for b in tables.get(r.id, ()):
                    free_after[b] = out.step
                if closed is not None:
                    for new in closed.on_finish(now):
                        sched.add(new)
                        added.add(new.id)
        if lag:
            completed = max(completed, out.step - rng.randint(0, lag))
            sched.complete(completed)
        else:
            completed = out.step
        prev_tables = pool.tables()
        # every request in exactly one place
        w, r_, f = [x.id for x in sched.waiting], [x.id for x in sched.running], [x.id for x in sched.finished]
        assert len(w) + len(r_) + len(f) == len(set(w) | set(r_) | set(f)) == len(added)
    assert sched.done, "the workload did not drain"
    assert sorted(r.id for r in sched.finished) == sorted(added)
    return sched


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    workload=workloads,
    block_size=st.integers(1, 4),
    width=st.integers(1, 5),
    max_batch=st.integers(1, 6),
    budget=st.integers(1, 24),
    extra=st.integers(0, 6),
    lag=st.integers(0, 2),
    seed=st.integers(0, 2**16),
)
def test_random_workloads_finish_once_cut_exactly(workload, block_size, width, max_batch, budget, extra, lag, seed):
    reqs = workload.requests()
    num_blocks = fitted_blocks(reqs, block_size, width, extra)
    sched = simulate(
        reqs,
        num_blocks=num_blocks,
        block_size=block_size,
        width=width,
        max_batch=max_batch,
        budget=budget,
        seed=seed,
        lag=lag,
    )
    for r in sched.finished:
        assert r.state is RequestState.FINISHED and 1 <= len(r.output) <= r.max_new_tokens
        stops = [i for i, t in enumerate(r.output) if t in r.stop_ids]
        assert stops in ([], [len(r.output) - 1])  # cut at its first stop token, nothing after it
        assert r.finish_reason is (FinishReason.STOP if stops else FinishReason.LENGTH)
        assert r.output == greedy(r)
    assert pool_drained(sched.pool, lag)


def pool_drained(pool: BlockPool, lag: int) -> bool:
    """Every block but the scratch one is free again (once the last steps retire)."""
    pool.retire(10**9)
    return pool.free_count == pool.capacity and not pool.tables()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workload=workloads, block_size=st.integers(1, 3), width=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_outputs_under_forced_preemption_equal_the_unconstrained_ones(workload, block_size, width, seed):
    reqs = workload.requests()
    big = simulate(
        [clone(r) for r in reqs],
        num_blocks=10_000,
        block_size=block_size,
        width=width,
        max_batch=64,
        budget=10_000,
        seed=seed,
    )
    tiny = simulate(
        [clone(r) for r in reqs],
        num_blocks=fitted_blocks(reqs, block_size, width, 0),
        block_size=block_size,
        width=width,
        max_batch=8,
        budget=7,
        seed=seed + 1,
        lag=1,
    )
    assert big.num_preemptions == 0
    event("preempted" if tiny.num_preemptions else "no preemption")
    target(float(tiny.num_preemptions))
    assert {r.id: r.output for r in tiny.finished} == {r.id: r.output for r in big.finished}


def clone(r: Request) -> Request:
    return Request(r.id, r.prompt, r.max_new_tokens, r.stop_ids, r.arrival)


def test_a_tiny_pool_preempts_and_stays_exact():
    reqs = Workload(
        num_requests=40, prompt_len=LengthDist.uniform(4, 12), output_len=LengthDist.uniform(8, 20), vocab=VOCAB, seed=5
    ).requests()
    sched = simulate(
        [clone(r) for r in reqs],
        num_blocks=fitted_blocks(reqs, 2, 3, 2),
        block_size=2,
        width=3,
        max_batch=6,
        budget=8,
        seed=0,
        lag=1,
    )
    assert sched.num_preemptions > 0 and any(r.preemptions for r in sched.finished)
    assert all(r.output == greedy(r) for r in sched.finished)


def test_closed_loop_keeps_n_in_flight_and_drains():
    loop = ClosedLoop(Workload(num_requests=20, output_len=LengthDist.uniform(1, 9), vocab=VOCAB, seed=2), in_flight=3)
    first = loop.start()
    sched = simulate(first, num_blocks=64, block_size=4, width=3, max_batch=8, budget=32, seed=1, closed=loop)
    assert len(sched.finished) == 20


def test_chunked_prefill_splits_a_long_prompt_over_steps():
    sched = Scheduler(BlockPool(64, 4), width=2, max_batch=4, max_prefill_tokens=5)
    sched.add(Request(0, prompt=tuple(range(1, 13)), max_new_tokens=3))
    chunks = []
    while not chunks or not chunks[-1].last:
        out = sched.schedule(now=0.0)
        chunks += out.prefill
        sched.update(out, {0: [3]} if out.prefill[-1].last else {})
    assert [(c.start, len(c.tokens)) for c in chunks] == [(0, 5), (5, 5), (10, 2)]


def test_the_newest_running_request_is_preempted_and_requeued_first():
    sched = Scheduler(BlockPool(1 + 6, 2), width=2, max_batch=4, max_prefill_tokens=100)
    for i in range(3):
        sched.add(Request(i, prompt=(1, 2), max_new_tokens=6))
    sched.add(Request(3, prompt=(4,), max_new_tokens=1))
    sched.add(Request(4, prompt=(4,), max_new_tokens=1))  # waits: the batch is full
    out = sched.schedule(now=0.0)  # four prompts, one block each
    sched.update(out, {c.id: [5] for c in out.prefill})  # request 3 finishes
    out = sched.schedule(now=0.0)  # verify: 3 + 2 positions, 3 blocks each; 6 blocks for 0, 1 and 2
    assert out.preempted == (2,) and out.verify == (0, 1) and out.prefill == ()
    assert [r.id for r in sched.waiting] == [2, 4] and sched.requests[2].state is RequestState.PREEMPTED
    assert sched.requests[2].num_computed == 0 and sched.requests[2].output == [5]  # recomputed when back


def test_a_request_that_can_never_fit_is_refused():
    sched = Scheduler(BlockPool(4, 2), width=2, max_batch=2, max_prefill_tokens=8)
    with pytest.raises(ValueError, match="may need"):
        sched.add(Request(0, prompt=(1,) * 5, max_new_tokens=4))


def test_read_lag_schedules_a_step_ahead_of_its_tokens():
    """``read_lag=1``: step k + 1 is scheduled before step k's tokens; a request in the unread step grows its
    table for two widths; one that finished at step k ran in step k + 1, whose tokens are dropped, and its
    blocks come back after step k + 1."""
    pool = BlockPool(num_blocks=16, block_size=4)
    sched = Scheduler(pool, width=3, max_batch=4, max_prefill_tokens=16, auto_retire=False, read_lag=1)
    sched.add(Request(0, prompt=(1, 2, 3), max_new_tokens=3))
    sched.add(Request(1, prompt=(4, 5), max_new_tokens=8))
    first = sched.schedule(now=0.0)
    sched.take_prefill(first, {0: [7], 1: [8]})
    sched.update(first, {0: [7], 1: [8]})
    out0 = sched.schedule(now=0.0)  # both verify: lengths 4 and 3, tables for length + width
    assert out0.verify == (0, 1) and [len(out0.tables[r]) for r in (0, 1)] == [2, 2]
    sched.take_prefill(out0, {})
    out1 = sched.schedule(now=0.0)  # step k unread: room for two widths
    assert sched.unread == {0, 1} and out1.verify == (0, 1)
    assert [len(out1.tables[r]) for r in (0, 1)] == [pool.blocks_for(4 + 6), pool.blocks_for(3 + 6)]
    with pytest.raises(RuntimeError, match="never came back"):
        sched.schedule(now=0.0)
    sched.take_prefill(out1, {})
    sched.update(out0, {0: [9, 9, 9], 1: [6]})  # request 0 reached its budget at step k
    assert sched.requests[0].output == [7, 9, 9] and sched.requests[0].finished
    assert pool.table(0) == () and pool.pending_count == 3  # released after step k + 1, which it ran in
    sched.complete(out0.step)
    assert pool.pending_count == 3
    sched.update(out1, {0: [5, 5], 1: [2, 3]})  # request 0's step-(k + 1) tokens are dropped
    assert sched.requests[0].output == [7, 9, 9] and sched.requests[1].output == [8, 6, 2, 3]
    sched.complete(out1.step)
    assert pool.pending_count == 0


def test_read_lag_a_request_preempted_while_its_step_is_unread_keeps_that_step():
    """Preempted in the scheduling of step k + 1, a request still takes step k's tokens (a finish included)."""
    pool = BlockPool(num_blocks=5, block_size=4)
    sched = Scheduler(pool, width=3, max_batch=4, max_prefill_tokens=16, auto_retire=False, read_lag=1)
    sched.add(Request(0, prompt=(1, 2, 3), max_new_tokens=6))
    sched.add(Request(1, prompt=(4, 5, 6), max_new_tokens=2))
    first = sched.schedule(now=0.0)
    sched.update(first, {0: [7], 1: [8]})
    out0 = sched.schedule(now=0.0)
    sched.take_prefill(out0, {})
    out1 = sched.schedule(now=0.0)  # request 0 needs a third block while step k is unread: request 1 goes
    assert out1.preempted == (1,) and out1.verify == () and sched.requests[1].state is RequestState.PREEMPTED
    sched.take_prefill(out1, {})
    sched.update(out0, {0: [9, 9], 1: [3]})
    req = sched.requests[1]
    assert req.output == [8, 3] and req.finish_reason is FinishReason.LENGTH and not sched.waiting
    assert sched.finished == [req] and sched.requests[0].output == [7, 9, 9]
