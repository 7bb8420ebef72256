"""The serving loop over the hybrid target (``qwen3.5-tiny``, float32, CPU) with its MTP head (and DFlash).

Every request's output is the hybrid's plain greedy decoding of its prompt alone (from scratch per token,
``oracles.hybrid_reference``), cut at its stop token or its budget, in ``baseline`` and ``specgen``, with
random arrivals, chunked prefills, preemptions and the lagged release.  After every iteration the committed
linear state of a few requests (slot 0 during and right after the prefill, the accepted row's slot after a
verification) equals the from-scratch recurrence over their committed tokens, and no two running requests
share a slot.
"""

from __future__ import annotations

import collections
import random

import pytest
import torch
from oracles.hybrid_reference import committed_state, hybrid_greedy
from oracles.serving import cut_at_stop

from specgen.engine import AcceptanceMix
from specgen.engine.draft_kinds import draft_kind
from specgen.engine.serving import LengthDist, Workload
from specgen.engine.serving.loop import ServingLoop
from specgen.models.qwen3_5 import Qwen35Model

BT, BS = 8, 16  # the hybrid_kernels layout (tests/conftest.py)
CHECKED = 3  # requests whose committed state is checked after every iteration (ids 0..CHECKED-1)


@pytest.fixture(scope="module")
def hybrid():
    model = Qwen35Model.create("qwen3.5-tiny", seed=0)
    return model, draft_kind("mtp").create(model, seed=1)


@pytest.fixture(scope="module")
def stops(hybrid):
    """Two token ids the hybrid's greedy decoding emits often: frequent stop tokens."""
    model, _ = hybrid
    rng = random.Random(7)
    prompts = [[rng.randrange(model.config.vocab_size) for _ in range(6)] for _ in range(8)]
    counts = collections.Counter(t for out in hybrid_greedy(model, prompts, 20) for t in out)
    return frozenset(t for t, _ in counts.most_common(2))


_greedy: dict = {}


def greedy(model, prompt: tuple[int, ...], n: int) -> list[int]:
    if len(_greedy.get(prompt, ())) < n:
        _greedy[prompt] = hybrid_greedy(model, [list(prompt)], max(n, 24))[0]
    return _greedy[prompt][:n]


def expected(model, req) -> list[int]:
    return cut_at_stop(greedy(model, req.prompt, req.max_new_tokens), req.stop_ids)


class StateCheck:
    """A loop observer: the committed linear state of requests ``0..CHECKED-1`` after every iteration."""

    def __init__(self, model):
        self.model, self.checked = model, 0
        self.slots_of: dict[int, tuple[int, ...]] = {}
        self.owner_in_flight: dict[int, dict[int, int]] = {}  # step -> {slot: request}

    def before_step(self, loop, out):
        pass

    def after_step(self, loop, out):
        running = loop.scheduler.running
        held = [s for r in running for s in loop.state.slots(r.id)]
        assert len(held) == len(set(held)), "two running requests share a linear-state slot"
        # no slot a step still in flight could write goes to another request
        for rid in out.ids:
            if loop.state.groups.table(rid):
                self.slots_of[rid] = loop.state.slots(rid)
        self.owner_in_flight[out.step] = {s: rid for rid in out.ids if rid in self.slots_of for s in self.slots_of[rid]}
        for step, owners in self.owner_in_flight.items():
            for r in running:
                for s in loop.state.slots(r.id):
                    assert owners.get(s, r.id) == r.id, f"slot {s} of request {owners[s]} (step {step}) went to {r.id}"
        self.owner_in_flight = {s: o for s, o in self.owner_in_flight.items() if s > loop.completed}
        ids, unread = loop.rows.ids, set(out.verify) if loop.read_lag else set()  # the newest step, if not read
        for req in running:
            if req.id >= CHECKED or req.id in unread:  # its slots already hold a step the host has not read
                continue
            slots = loop.state.slots(req.id)
            if req.in_prefill:  # slot 0 holds the state after the chunks so far
                if req.num_computed == 0:
                    continue
                slot, n = slots[0], req.num_computed
            elif req.id in loop.rows.joined:  # the prefill's final state, read by the first verification (its
                slot, n = slots[0], req.num_computed  # token may still be unread: ``late_first``)
            elif req.id in ids:  # the accepted row's slot: every token but the newest (the bonus)
                slot, n = slots[int(loop.rows.bufs[0]["accepted"][ids.index(req.id)])], req.length - 1
            else:
                continue
            want = committed_state(self.model, list(req.prefix[:n]))
            for (state, window), (want_state, want_window) in zip(loop.state.committed(slot), want):
                torch.testing.assert_close(state, want_state, atol=2e-5, rtol=1e-4)
                torch.testing.assert_close(window, want_window, atol=2e-5, rtol=1e-4)
            self.checked += 1


@pytest.mark.parametrize(
    "kind, mode, lag, read_lag",
    [
        ("mtp", "baseline", 1, 0),
        ("mtp", "specgen", 0, 0),
        ("mtp", "specgen", 1, 0),
        ("dflash", "specgen", 1, 0),
        ("mtp", "baseline", 0, 1),
        ("mtp", "specgen", 1, 1),
    ],
)
def test_hybrid_outputs_are_greedy_and_states_committed(hybrid, hybrid_kernels, stops, kind, mode, lag, read_lag):
    """``read_lag=1``: tokens read one step late (a finished request's last step dropped, its slots held)."""
    model, head = hybrid
    if kind != "mtp":  # a block draft over the hybrid: its taps of the hybrid's layers
        head = draft_kind(kind).create(model, seed=1)
    reqs = Workload(
        num_requests=20,
        rate=80.0,
        prompt_len=LengthDist.uniform(1, 24),
        output_len=LengthDist.uniform(1, 24),
        vocab=model.config.vocab_size,
        seed=31 + lag + 2 * read_lag,
    ).requests()
    for r in reqs:
        r.stop_ids = stops
    width = 4
    rows = torch.tensor([greedy(model, r.prompt, 24 + width + 1) for r in sorted(reqs, key=lambda r: r.id)])
    loop = ServingLoop(
        model,
        head,
        mode=mode,
        depth=width - 1,
        max_batch=4,
        num_blocks=7,
        block_size=BS,
        block_table_width=BT,
        max_prefill_tokens=16,
        kernels=hybrid_kernels if mode == "specgen" else None,
        acceptance=AcceptanceMix(0.8, rows, vocab_size=model.config.vocab_size, seed=3),
        complete_lag=lag,
        read_lag=read_lag,
    )
    loop.observer = check = StateCheck(model)
    run = loop.run(reqs)
    assert sorted(loop.requests) == sorted(r.id for r in reqs)
    for r in reqs:
        assert loop.requests[r.id].output == expected(model, r), f"request {r.id}"
        assert run.requests[r.id].output_len == len(loop.requests[r.id].output)
    assert run.preemptions > 0 and check.checked > 0 and run.settings["read_lag"] == read_lag
    assert {rec.finish for rec in run.requests} == {"stop", "length"}
    assert run.metrics()["acceptance"] > 0.3  # accepted drafts: committed slots other than 0 are read
    assert sum(s.remaps for s in run.steps) > 0
    transitions = run.metrics()["transitions"]
    if mode == "specgen":  # the rows moved by the built remap family (c), the state slots by the host's rows
        assert all(s.fast_path and s.reason is None for s in run.steps)
        assert transitions["kernel"] == transitions["steps"] > 0 and transitions["torch"] == {}
    else:
        assert transitions["torch"] == {"mode": transitions["steps"]}
    assert loop.state.groups.free_count + loop.state.groups.pending_count == loop.state.groups.capacity


def test_state_slots_wait_for_steps_in_flight(hybrid):
    """A request's slots come back only once the last step that could write them completed."""
    from specgen.engine.serving.state_slots import StateSlots
    from specgen.models.errors import EngineError

    slots = StateSlots(hybrid[0], groups=2, width=4, device=torch.device("cpu"))  # group 0 is never handed out
    assert slots.take(1) == (4, 5, 6, 7) and slots.slots(1) == (4, 5, 6, 7)
    with pytest.raises(EngineError, match="no free linear-state slots"):
        slots.take(2)
    slots.release(1, after_step=5)
    slots.retire(4)
    with pytest.raises(EngineError, match="1 in flight"):
        slots.take(2)
    slots.retire(5)
    kw = slots.prefill_kwargs(2, start=0, rows=3)  # the first chunk takes the group: zero state in, slot 0 out
    assert kw["state_read"].tolist() == [-1] and kw["state_write"].tolist() == [-1, -1, 4]
    assert slots.prefill_kwargs(2, start=3, rows=2)["state_read"].tolist() == [4]
    assert slots.row_slots([2], 2).tolist() == [[4, 5, 6, 7], [-1, -1, -1, -1]]
