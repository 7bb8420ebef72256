"""The serving scheduler with every token read a step late, the prefills' first tokens included (the serving
loop's ``late_first``): outputs exact, and the rules of a late prefill token."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from oracles.scheduler_model import fitted_blocks, greedy, next_token, workloads

from specgen.engine.serving import BlockPool, Request, Scheduler


def simulate_late(reqs, *, num_blocks, block_size, width, max_batch, budget, seed):
    """``read_lag=1`` with prefill tokens read late too (the serving loop's ``late_first``): a fake device keeps
    each request's true sequence; step k's tokens (its prefills' first, then its verify tokens) reach the
    scheduler only after step k + 1 is scheduled.  Checks the tables against the device's lengths and that no
    step runs a request whose budget ends at its unread first token."""
    rng = random.Random(seed)
    pool = BlockPool(num_blocks, block_size)
    sched = Scheduler(pool, width, max_batch, budget, auto_retire=False, read_lag=1)
    for r in reqs:
        sched.add(r)
    device: dict[int, tuple] = {}  # request id -> its sequence on the device (unread tokens included)
    pending, joined_unread = [], 0

    def read():
        out, firsts, toks = pending.pop(0)
        sched.take_first(out, firsts)
        sched.update(out, toks)
        sched.complete(out.step)

    for _ in range(20_000):
        if sched.done and not pending:
            break
        out = sched.schedule(now=sched.step * 0.05)
        tables = pool.tables()
        firsts, toks = {}, {}
        for c in out.prefill:
            if c.last:
                seq = sched.requests[c.id].prefix
                device[c.id] = seq + (next_token(seq),)
                firsts[c.id] = [device[c.id][-1]]
        for rid in out.verify:
            req = sched.requests[rid]
            if rid in sched.unread_first:
                joined_unread += 1
                assert len(req.output) + 1 < req.max_new_tokens, "a step past the budget of the unread token"
            assert len(tables[rid]) * block_size >= len(device[rid]) + width
            seq, new = device[rid], []
            for _ in range(rng.randint(1, width)):
                new.append(next_token(seq))
                seq += (new[-1],)
            device[rid], toks[rid] = seq, new
        sched.take_prefill(out, {}, late=firsts)
        pending.append((out, firsts, toks))
        while len(pending) > (1 if out.ids else 0):
            read()
    assert sched.done and not pending, "the workload did not drain"
    assert sorted(r.id for r in sched.finished) == sorted(r.id for r in reqs)
    return sched, joined_unread


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    workload=workloads,
    block_size=st.integers(1, 4),
    width=st.integers(1, 5),
    max_batch=st.integers(1, 6),
    budget=st.integers(1, 24),
    extra=st.integers(0, 6),
    seed=st.integers(0, 2**16),
)
def test_late_prefill_tokens_keep_outputs_exact(workload, block_size, width, max_batch, budget, extra, seed):
    """Random workloads with every token read a step late, the prefills' first tokens included: each output is
    the request's greedy decoding, cut exactly; a request verifies before its first token is read."""
    reqs = workload.requests()
    # the lagged reads need width more positions per request (Scheduler.add)
    blocks = fitted_blocks(reqs, block_size, 2 * width, extra)
    sched, joined_unread = simulate_late(
        reqs, num_blocks=blocks, block_size=block_size, width=width, max_batch=max_batch, budget=budget, seed=seed
    )
    for r in sched.finished:
        assert r.output == greedy(Request(r.id, r.prompt, r.max_new_tokens, r.stop_ids))
    event(f"verified before the first token was read: {joined_unread > 0}")


def test_late_prefill_token_rules():
    """A prefill token read late: the request verifies at once with its table grown for that token, except when
    its budget ends there; reads come back in order, and a late id without a last chunk is refused."""
    pool = BlockPool(num_blocks=16, block_size=4)
    sched = Scheduler(pool, width=3, max_batch=4, max_prefill_tokens=16, auto_retire=False, read_lag=1)
    sched.add(Request(0, prompt=(1, 2, 3), max_new_tokens=5))
    sched.add(Request(1, prompt=(4, 5), max_new_tokens=1))  # its budget ends at the prefill's token
    first = sched.schedule(now=0.0)
    with pytest.raises(ValueError, match="no token of step 0"):
        sched.take_prefill(first, {}, late={0, 7})
    sched.take_prefill(first, {}, late={0, 1})
    assert sched.unread_first == {0, 1} and sched.requests[0].output == []
    out1 = sched.schedule(now=0.0)  # request 0 verifies from its prefill's state; request 1 waits for its read
    assert out1.verify == (0,) and len(out1.tables[0]) == pool.blocks_for(3 + 1 + 3)
    sched.take_prefill(out1, {})
    with pytest.raises(RuntimeError, match="before its prefills'"):
        sched.update(first, {})
    with pytest.raises(ValueError, match="to read"):
        sched.take_first(first, {0: [7]})
    sched.take_first(first, {0: [7], 1: [8]})
    sched.update(first, {})
    assert sched.requests[1].output == [8] and sched.requests[1].finished and sched.unread_first == set()
    sched.update(out1, {0: [9, 2]})
    assert sched.requests[0].output == [7, 9, 2]
