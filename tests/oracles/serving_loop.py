"""The serving loop's test harness over the tiny target: the requests' expected outputs, loop observers that
check KV isolation and the block draft's context after every iteration, and a run with their assertions."""

from __future__ import annotations

import torch
from oracles.serving import churn_requests, cut_at_stop

from specgen.engine import AcceptanceMix, greedy_generate
from specgen.engine.serving.loop import ServingLoop
from specgen.models import Qwen3Model
from specgen.runtime.semantics import slot

BT, BS = 8, 16  # the engine_kernels layout (tests/conftest.py)


def workload(model, stops, n: int, seed: int, rate: float | None = 40.0):
    return churn_requests(model, stops, n, seed, rate)


_greedy_cache: dict = {}


def greedy(model, prompt: tuple[int, ...], n: int) -> list[int]:
    key = (id(model), prompt)
    have = _greedy_cache.get(key)
    if have is None or len(have) < n:
        have = greedy_generate(model, [list(prompt)], max(n, 32))[0]
        _greedy_cache[key] = have
    return have[:n]


def expected(model, req) -> list[int]:
    return cut_at_stop(greedy(model, req.prompt, req.max_new_tokens), req.stop_ids)


def oracle_mix(model, reqs, p: float, width: int) -> AcceptanceMix:
    g = max(r.max_new_tokens for r in reqs) + width + 1
    rows = torch.tensor([greedy(model, r.prompt, g) for r in sorted(reqs, key=lambda r: r.id)])
    return AcceptanceMix(p, rows, vocab_size=model.config.vocab_size, seed=3)


class Checks:
    """A loop observer: KV isolation per iteration, and no block handed on while a step that wrote it is in flight."""

    def __init__(self, loop: ServingLoop):
        self.loop, self.iterations = loop, 0
        self.owner_in_flight: dict[int, dict[int, int]] = {}  # step -> {block: request}

    def caches(self):
        m, h = self.loop.model.kv_cache, self.loop.head.kv_cache
        return [m._k, m._v, h._k, h._v]

    def before_step(self, loop, out):
        self.before = [c.view(torch.int32).clone() for c in self.caches()]
        self.out = out
        for step, owners in self.owner_in_flight.items():
            if step <= loop.completed:
                continue
            for rid, table in out.tables.items():
                for b in table:
                    assert owners.get(b, rid) == rid, f"block {b} of request {owners[b]} (step {step}) went to {rid}"
        self.owner_in_flight = {s: o for s, o in self.owner_in_flight.items() if s > loop.completed}
        self.owner_in_flight[out.step] = {b: rid for rid, t in out.tables.items() for b in t}

    def after_step(self, loop, out):
        self.iterations += 1
        own = {0} | {b for t in out.tables.values() for b in t}  # the scratch block, the iteration's blocks
        num_slots = loop.model.kv_cache.num_slots
        for before, c in zip(self.before, self.caches()):
            diff = (before != c.view(torch.int32)).flatten(2).any(-1).any(0).nonzero().flatten().tolist()
            stray = [s for s in diff if s < num_slots and s // BS not in own]
            assert not stray, f"step {out.step} wrote slots {stray[:4]} outside its requests' blocks"


class ContextChecks(Checks):
    """Also, for a block draft: after every iteration the draft's context K/V of requests 0..2 at every
    committed position equals the projection of a from-scratch target prefill's taps over those tokens."""

    def __init__(self, loop: ServingLoop):
        super().__init__(loop)
        self.ref, self.checked = Qwen3Model.create("tiny", seed=0), 0  # the target again, with its own cache

    def after_step(self, loop, out):
        super().after_step(loop, out)
        draft = loop.head
        for req in loop.scheduler.running:
            n = req.num_computed if req.in_prefill else req.length - 1
            if req.id >= 3 or n == 0:
                continue
            blocks, pos = -(-n // BS), torch.arange(n)
            self.ref.allocate_kv_cache(blocks + 1, BS, block_table_width=blocks)
            bt = torch.arange(1, blocks + 1, dtype=torch.int32)[None]
            toks = torch.tensor(req.prefix[:n])
            args = (pos, slot(bt, pos[None], BS)[0], bt, torch.tensor([n]), torch.tensor([0, n]), n)
            _, _, taps = self.ref(toks, *args, taps=draft.tap_layers)
            sl = slot(torch.tensor([loop.pool.table(req.id)], dtype=torch.int32), pos[None], BS)[0].long()
            for i, (k, v) in enumerate(draft.context_kv(taps, pos)):
                torch.testing.assert_close(draft.kv_cache._k[i][sl], k, atol=1e-5, rtol=1e-4)
                torch.testing.assert_close(draft.kv_cache._v[i][sl], v, atol=1e-5, rtol=1e-4)
            self.checked += 1


def serve(tiny, lib, mode, reqs, *, depth=3, check=False, **kw):
    model, head = tiny
    loop = ServingLoop(
        model,
        head,
        mode=mode,
        depth=depth,
        max_batch=kw.pop("max_batch", 4),
        num_blocks=kw.pop("num_blocks", 10),
        block_size=BS,
        block_table_width=BT,
        max_prefill_tokens=kw.pop("max_prefill_tokens", 16),
        kernels=lib if mode in ("specgen", "inductor") else None,
        compile_backend="eager",  # compile / inductor on the CPU: the same functions, uncompiled
        **kw,
    )
    checks = (check if isinstance(check, type) else Checks)(loop) if check else None
    loop.observer = checks
    return loop, loop.run(reqs), checks


def assert_exact(model, loop, run, reqs, why: str | None = None):
    assert sorted(loop.requests) == sorted(r.id for r in reqs)  # none lost, none duplicated
    assert [r.id for r in run.requests] == sorted(r.id for r in reqs)
    for r in reqs:
        got, rec = loop.requests[r.id], run.requests[r.id]
        assert got.output == expected(model, r), f"request {r.id}"
        assert rec.output_len == len(got.output) == len(rec.token_times)
        assert rec.finish == got.finish_reason.value
        assert rec.preemptions == got.preemptions
        assert all(r.arrival <= t for t in rec.token_times)
        assert rec.token_times == sorted(rec.token_times)
    steps = run.steps
    assert all(1 <= s.batch <= loop.max_batch and s.proposed == s.batch * loop.depth for s in steps)
    assert all(s.host_syncs == 0 for s in steps)  # the CPU: nothing measured
    assert [s.t for s in steps] == sorted(s.t for s in steps)
    assert 0 < run.longest_iteration_s <= run.elapsed_s and 0 <= run.longest_iteration_step <= loop.scheduler.step
    assert run.prefill_chunks >= len(reqs) and run.metrics()["host_syncs_per_prefill"] == 0  # the CPU: none
    assert_remapped(loop, run, why)


def assert_remapped(loop, run, why: str | None = None):
    """Every step whose rows changed moved them on the device: ``specgen`` by the built remap family (its c
    variant here), ``baseline`` by the family's torch semantics; ``why``: the reason a specgen run gave."""
    moves = [s for s in run.steps if s.remaps or s.joined]
    assert all((s.remap_path is None) == (not (s.remaps or s.joined)) for s in run.steps)
    t = run.metrics()["transitions"]
    assert t["steps"] == len(moves) > 0
    if run.mode == "specgen" and why is None:
        assert loop.rows.kernel is not None and "target=c" in repr(loop.rows.kernel)
        assert t["kernel"] == len(moves) and t["torch"] == {} and all(s.remap_reason is None for s in moves)
    else:
        assert t["kernel"] == 0 and t["torch"] == {why or "mode": len(moves)}
