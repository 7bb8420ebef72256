"""KV isolation over whole decode runs: no step ever writes a KV slot outside its own sequences' blocks.

Two drivers, both on the built C kernels (``engine_kernels``, bt8 bs16):

* a pool of sequences over ``SpecVerifyRuntime.step_in_place``: every step
  verifies a random subset (so the batch and its bucket change), forces a
  random accepted count per row, writes the verified and the next draft's rows
  into a paged KV cache, and sometimes writes a bad value into the step buffers
  behind the host's back (an unallocated block, a sequence at the end of its
  table, a negative length, a block id whose slots overflow int32);
* ``SpecDecodeEngine`` in specgen mode with the acceptance control and the
  same faults injected between steps (``engine.observer``).

After each step every KV slot outside ``slot(b, p)`` for the step's own rows
(positions the step may write: ``S .. S + W`` for a verification,
``N - 1 .. N + W - 1`` for an engine step) must be bit-identical, the
scratch block and the no-write slot aside.  Own blocks are the sequence's
allocation, never what the (possibly corrupted) buffers say.
"""

from __future__ import annotations

import os
import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specgen.engine import AcceptanceMix, SpecDecodeEngine, greedy_generate
from specgen.models import BlockAllocator, MTPHead, PagedKVCache, Qwen3Model
from specgen.runtime.capabilities import SpeculativeVerifyCapabilities
from specgen.runtime.verify_graph import SpecVerifyRuntime

BT, BS = 8, 16  # the engine_kernels layout (tests/conftest.py)
CAP = BT * BS
VOCAB = 512
I32 = torch.int32
SAFE_FAULTS = ("unallocated_block", "end_of_table")  # faults inside what the engine itself can run with
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32) if t.dtype == torch.float32 else t


def snapshot(caches) -> list[torch.Tensor]:
    return [_bits(c).clone() for c in caches]


def changed_slots(before, caches) -> set[int]:
    """Slots (axis 1 of every ``[layers, slots + 1, ...]`` cache) whose bits differ from ``before``."""
    out: set[int] = set()
    for b, c in zip(before, caches):
        diff = (b != _bits(c)).flatten(2).any(-1).any(0)
        out.update(diff.nonzero().flatten().tolist())
    return out


def own_slots(seq_len: int, row: list[int], owned: set[int], first: int, last: int) -> set[int]:
    """``slot(b, p)`` for ``p`` in ``seq_len + first .. seq_len + last`` where the entry is one of ``owned``."""
    out = set()
    for p in range(seq_len + first, seq_len + last + 1):
        if 0 <= p < CAP and row[p // BS] in owned:
            out.add(row[p // BS] * BS + p % BS)
    return out


def inject(
    kind: str, table_row: torch.Tensor, seq_lens: torch.Tensor, r: int, width: int, rng: random.Random, num_blocks: int
) -> None:
    """Write one bad value for row ``r`` into the step buffers (its position ``S`` is ``seq_lens[r]``).

    An entry past int32 is chosen so that ``entry * BS`` wraps onto a block the
    row does not own.
    """
    s = int(seq_lens[r])
    if kind == "unallocated_block":  # a block the step maps is not allocated
        table_row[min(max(s + rng.randint(0, width), 0), CAP - 1) // BS] = -1
    elif kind == "end_of_table":
        seq_lens[r] = CAP - rng.randint(0, width)
    elif kind == "negative_seq_len":
        seq_lens[r] = -rng.randint(1, 2 * BS)
    else:  # entry * BS wraps int32 onto a real slot of a block of someone else
        mine = set(table_row.tolist())
        table_row[min(max(s, 0), CAP - 1) // BS] = 2**32 // BS + rng.choice(
            [b for b in range(num_blocks) if b not in mine]
        )


# ------------------------------------------------------------------- the pool driver
class Pool:
    """``n`` sequences with their own blocks, verified in random subsets through one runtime."""

    def __init__(self, lib, width: int, n: int, rng: random.Random):
        self.width, self.n, self.rng = width, n, rng
        self.num_blocks = 1 + n * BT + 4  # one scratch block, 4 spare blocks nobody owns
        # the scratch block is the last one: block 0 belongs to a sequence, so a slot that falls back
        # to block 0 is caught
        self.scratch = self.num_blocks - 1
        blocks = [b for b in BlockAllocator(self.scratch, seed=rng.randrange(1000)).allocate(self.scratch)]
        self.table = [blocks[i * BT : (i + 1) * BT] for i in range(n)]
        self.cache = PagedKVCache(1, self.num_blocks, BS, 1, 2)
        self.seq = [rng.randint(0, CAP - 2 * width - 2) for _ in range(n)]
        self.last = [rng.randrange(VOCAB) for _ in range(n)]
        self.step_no, self.forced = 0, None
        caps = SpeculativeVerifyCapabilities(supports_in_graph_input_update=True, block_size=BS, block_table_width=BT)
        self.rt = SpecVerifyRuntime(lib, self.forward, caps, width, max_batch=n, scratch_block=self.scratch)

    def forward(self, bufs):
        """Writes each verify row's K/V (a value new every step) and forces the accepted counts."""
        w = self.width
        tokens, pos = bufs["tokens"].long(), bufs["positions"].long()
        val = (tokens * 1000 + pos * 7 + self.step_no).float()
        kv = torch.stack([val, -val], -1)[:, None, :]
        self.cache.write(0, bufs["slot_mapping"], kv, kv)
        drafts = tokens.view(-1, w)[:, 1:]
        j = torch.arange(w - 1)
        target = torch.where(j < self.forced[: drafts.shape[0], None], drafts, (drafts + 1) % VOCAB)
        return torch.cat([target, (drafts[:, :1] * 3) % VOCAB], 1).to(I32)

    def step(self, fault_rate: float, faults) -> tuple[bool, bool]:
        """One verification of a random subset; asserts isolation. Returns (injected, fast path)."""
        w, rng = self.width, self.rng
        rows = rng.sample(range(self.n), rng.randint(1, self.n))
        k = len(rows)
        bufs = self.rt.buffers(k)
        seq = torch.tensor([self.seq[s] for s in rows], dtype=I32)
        bufs["seq_lens"][:k].copy_(seq)
        bufs["last_tokens"][:k].copy_(torch.tensor([self.last[s] for s in rows], dtype=I32))
        bufs["draft_tokens"][:k].copy_(torch.randint(0, VOCAB, (k, w - 1), dtype=I32))
        bufs["block_table"][:k].copy_(torch.tensor([self.table[s] for s in rows], dtype=I32))
        bounds = (int(seq.min()), int(seq.max()))  # the host's view, before any fault
        injected = bool(faults) and rng.random() < fault_rate
        if injected:
            r = rng.randrange(k)
            inject(rng.choice(faults), bufs["block_table"][r], bufs["seq_lens"], r, w, rng, self.num_blocks)
        self.forced = torch.tensor([rng.randint(0, w - 1) for _ in range(bufs["seq_lens"].shape[0])])
        seen_s, seen_t = bufs["seq_lens"][:k].tolist(), bufs["block_table"][:k].tolist()
        # the scratch block and the no-write slot
        allowed = set(range(self.scratch * BS, self.scratch * BS + BS)) | {self.cache.num_slots}
        for r, s in enumerate(rows):
            allowed |= own_slots(seen_s[r], seen_t[r], set(self.table[s]), 0, w)
        before = snapshot([self.cache._k, self.cache._v])
        self.step_no += 1
        res = self.rt.step_in_place(k, bounds)
        # the next draft's two rows (repair and new input) land where prepare_next_draft says
        d = (self.step_no * 13 + torch.arange(2 * k, dtype=torch.float32))[:, None, None].expand(-1, 1, 2)
        self.cache.write(0, res.draft_slots.reshape(-1), d, d)
        bad = changed_slots(before, [self.cache._k, self.cache._v]) - allowed
        assert not bad, self._blame(bad, rows, seen_s, seen_t, res.fast_path)
        assert res.accepted.tolist() == self.forced[:k].tolist()  # the acceptance is pinned
        for r, s in enumerate(rows):
            self.seq[s] += int(res.accepted[r]) + 1
            self.last[s] = int(res.next_tokens[r, res.accepted[r]])
            if self.seq[s] + 2 * w + 1 > CAP:  # finished: a new sequence takes over its blocks
                self.seq[s], self.last[s] = rng.randint(0, 3 * BS), rng.randrange(VOCAB)
        return injected, res.fast_path

    def _blame(self, bad, rows, seen_s, seen_t, fast) -> str:
        owner = {blk: s for s in range(self.n) for blk in self.table[s]}
        who = sorted({(slot, owner.get(slot // BS, "unowned")) for slot in bad})[:8]
        return (
            f"step {self.step_no} ({'fast path' if fast else 'eager'}) wrote slots outside its rows: "
            f"(slot, owner) {who}; rows {rows}, seq_lens {seen_s}, tables {seen_t}"
        )


def run_pool(lib, width, n, seed, steps, fault_rate, faults):
    pool = Pool(lib, width, n, random.Random(seed))
    flagged = 0
    for _ in range(steps):
        injected, fast = pool.step(fault_rate, faults)
        flagged += injected and fast
    pool.step(0.0, ())  # the step after the last fault reads its flag
    stats = pool.rt.stats()
    # every fault that reached the fast path tripped the device guard once; a clean run never trips
    assert stats["fallback"].get("device_guard_trip", 0) == flagged, stats
    assert stats["fast_path"] >= 1
    return stats


@settings(max_examples=40, **SETTINGS)
@given(
    width=st.sampled_from([2, 3, 4, 5, 6]),
    n=st.integers(1, 6),
    seed=st.integers(0, 2**31 - 1),
    fault_rate=st.sampled_from([0.0, 0.1, 0.3]),
)
def test_pool_steps_write_only_their_own_blocks(engine_kernels, width, n, seed, fault_rate):
    """Random subsets, forced acceptance, an unallocated block or a full table now and then: 40 x 50 steps."""
    run_pool(engine_kernels, width, n, seed, 50, fault_rate, SAFE_FAULTS)


@settings(max_examples=15, **SETTINGS)
@given(
    width=st.sampled_from([2, 4, 6]),
    n=st.integers(2, 6),
    seed=st.integers(0, 2**31 - 1),
    fault=st.sampled_from(["negative_seq_len", "entry_past_int32"]),
)
def test_pool_isolation_under_out_of_domain_values(engine_kernels, width, n, seed, fault):
    """A negative length or a block id past int32 on the fast path, then the eager path the device guard picks.

    Before the kernels were total, a negative S mapped its rows into block 0 and an entry whose slots
    pass int32 wrapped onto another sequence's block; both fail this test.
    """
    run_pool(engine_kernels, width, n, seed, 30, 0.3, (fault,))


# ------------------------------------------------------------------ the engine driver
class KVWatch:
    """An engine observer: injects faults before a step, checks both KV caches after it."""

    def __init__(self, rng: random.Random, fault_rate: float, faults, last_fault_step: int):
        self.rng, self.fault_rate, self.faults, self.last_fault_step = rng, fault_rate, faults, last_fault_step
        self.steps = self.injected = 0
        self._undo = None

    def _caches(self, e):
        return [e.model.kv_cache._k, e.model.kv_cache._v, e.head.kv_cache._k, e.head.kv_cache._v]

    def before_step(self, e, i):
        if e.device.type == "cuda":
            torch.cuda.synchronize()  # nothing of the step before still reads the buffers
        b, w = e.bufs, e.width
        # the draft's first two rows were prepared by the step before, for the state before any fault
        prepared = b["next_seq_lens"].tolist(), b["block_table"].tolist()
        if self._undo is not None:  # an unallocated block is allocated again after one step
            self._undo()
            self._undo = None
        if self.faults and i <= self.last_fault_step and self.rng.random() < self.fault_rate:
            self.injected += 1
            r = self.rng.randrange(e.batch)
            row, kept = b["block_table"][r], b["block_table"][r].clone()
            # the draft graph reads next_seq_lens (and copies it to seq_lens); faults in S go there
            inject(self.rng.choice(self.faults), row, b["next_seq_lens"], r, w, self.rng, e.model.kv_cache.num_blocks)
            self._undo = lambda: row.copy_(kept)
        n_, tables = b["next_seq_lens"].tolist(), b["block_table"].tolist()
        own = e.block_table.tolist()
        self.allowed = set(range(BS)) | {e.model.kv_cache.num_slots}
        for r in range(e.batch):  # the draft writes N - 1 .. N + W - 2, the verification N .. N + W - 1
            self.allowed |= own_slots(n_[r], tables[r], set(own[r]), -1, w - 1)
            self.allowed |= own_slots(prepared[0][r], prepared[1][r], set(own[r]), -1, 0)
        self.before = snapshot(self._caches(e))
        self.seen = (n_, tables)

    def after_step(self, e, i):
        if e.device.type == "cuda":
            torch.cuda.synchronize()
        self.steps += 1
        bad = changed_slots(self.before, self._caches(e)) - self.allowed
        assert not bad, (
            f"step {i}: slots {sorted(bad)[:8]} written outside the rows' own blocks; "
            f"next_seq_lens {self.seen[0]}, tables {self.seen[1]}"
        )


def _prompts(batch: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(VOCAB) for _ in range(rng.randint(1, 10))] for _ in range(batch)]


_ORACLE: dict = {}


def decode_watched(model, head, lib, width, batch, seed, p, fault_rate, faults, device="cpu"):
    prompts = _prompts(batch, seed % 4)
    steps = (CAP - 11) // width - 3  # as many as the table holds
    key = (device, batch, seed % 4)
    if key not in _ORACLE:
        _ORACLE[key] = torch.tensor(greedy_generate(model, prompts, CAP), device=device)
    mix = AcceptanceMix(p, _ORACLE[key], model.config.vocab_size, seed=seed)
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
    watch = KVWatch(random.Random(seed), fault_rate, faults, last_fault_step=steps - 2)
    eng.observer = watch
    res = eng.run(prompts, steps=steps)
    assert watch.steps == steps
    if not faults or fault_rate == 0:  # clean: lossless, every step on the fast path, no trip
        assert res.runtime_stats["fallback"] == {} and res.runtime_stats["device_guard"] == {}
        assert res.outputs == [o[: len(r)] for o, r in zip(_ORACLE[key].tolist(), res.outputs)]
    return watch, res


@settings(max_examples=24, **SETTINGS)
@given(
    width=st.sampled_from([2, 3, 4, 5, 6]),
    batch=st.integers(1, 5),
    seed=st.integers(0, 2**20),
    p=st.sampled_from([0.0, 0.5, 0.8, 1.0]),
    fault_rate=st.sampled_from([0.0, 0.15, 0.4]),
)
def test_engine_decode_keeps_kv_isolated(tiny, engine_kernels, width, batch, seed, p, fault_rate):
    """Whole specgen decode runs with random acceptance and injected faults (the kernels' safe ones)."""
    watch, res = decode_watched(*tiny, engine_kernels, width, batch, seed, p, fault_rate, SAFE_FAULTS)
    if watch.injected:
        assert res.runtime_stats["fallback"].get("device_guard_trip", 0) >= 1


@settings(max_examples=8, **SETTINGS)
@given(width=st.sampled_from([2, 4, 6]), batch=st.integers(2, 5), seed=st.integers(0, 2**20))
def test_engine_decode_with_negative_lengths(tiny, engine_kernels, width, batch, seed):
    """Negative lengths in the engine (its block 0 is the scratch block; the pool driver owns block 0).

    (An entry past int32 is left to the pool driver: the engine's attention gathers every entry.)
    """
    watch, res = decode_watched(*tiny, engine_kernels, width, batch, seed, 0.7, 0.3, ("negative_seq_len",))
    if watch.injected:
        assert res.runtime_stats["device_guard"].get("min_seq_len >= 0", 0) >= 1


# ----------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("width", [2, 4, 6])
def test_cuda_kv_isolation_soak(engine_kernels, width):
    """On the GPU: SPECGEN_KV_SOAK_RUNS (default 12) engine runs per width with faults, KV checked every step.

    Kernels: SPECGEN_TEST_ENGINE_KERNELS, a build with --target c,cuda (see tests/conftest.py).
    """
    torch.backends.cuda.matmul.allow_tf32 = False
    m = Qwen3Model.create("tiny", seed=0, device="cuda")
    head = MTPHead.create(m, seed=1)
    runs = int(os.environ.get("SPECGEN_KV_SOAK_RUNS", "12"))
    steps = trips = 0
    for run in range(runs):
        # the engine's attention gathers every entry, so an entry past int32 is the pool driver's only
        faults = (*SAFE_FAULTS, "negative_seq_len")
        watch, res = decode_watched(
            m,
            head,
            engine_kernels,
            width,
            1 + run % 6,
            1000 * width + run,
            [0.0, 0.5, 0.9][run % 3],
            0.0 if run % 4 == 0 else 0.2,
            faults,
            device="cuda",
        )
        steps += watch.steps
        trips += res.runtime_stats["fallback"].get("device_guard_trip", 0)
    print(f"cuda kv soak w{width}: {runs} runs, {steps} steps checked, {trips} device guard trips")
