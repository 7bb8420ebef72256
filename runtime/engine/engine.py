"""One speculative decode loop (target + MTP head), three ways to cross its boundaries.

``SpecDecodeEngine`` runs greedy speculative decoding for a fixed batch ``B``
and verify width ``W`` (draft depth ``W - 1``) over a paged KV cache whose
block 0 is the scratch block.  Every mode runs the same captured draft graph
(the MTP head's repair + new row, then the chain) and the same target
forward; they differ only in how each boundary is crossed:

``baseline``
    the "before" paths of references 000 and 004: after the final draft the
    host synchronizes, stacks and casts the tokens, computes positions,
    slots, KV lengths and attention tiling, and copies them into the verify
    graph's buffers; after verification it synchronizes again, runs the
    acceptance and builds the next draft's inputs on the host, and copies
    them back.  Two host synchronizations per step.
``compile``
    the same update and acceptance code (the families' torch references) as
    ``torch.compile``'d functions captured with the target forward in one
    CUDA graph; the acceptance is read back with a host synchronization each
    step, as gpt-fast does.  One host synchronization per step.
``specgen``
    ``SpecVerifyRuntime``'s verify graph: the built kernel variants update
    the inputs in the graph, acceptance and next-draft preparation run on the
    device, the draft graph writes straight into the runtime's persistent
    buffers, and the host reads each step's tokens one step late through a
    pinned buffer and an event.  No host synchronization per step.

On the CPU the graphs run eagerly (``compile`` mode takes ``compile_backend``,
e.g. ``"eager"`` in tests).  ``run`` returns the tokens, the acceptance and,
with ``timing=True`` on CUDA, per-step CUDA-event timings and host
synchronization counts.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from dataclasses import dataclass, field
from statistics import median
from typing import Callable

import torch

from .. import semantics as ref
from ..capabilities import capabilities_of
from ..verify_graph import DeviceAPI, SpecVerifyRuntime, alloc_step_buffers

from .draft import MTPHead
from .model import Qwen3Model
from .paged_kv import BlockAllocator, slot

__all__ = ["MODES", "EngineError", "OracleMix", "RunResult", "SpecDecodeEngine", "StepTiming"]

MODES = ("baseline", "compile", "specgen")
I32 = torch.int32
SCRATCH_BLOCK = 0
# Fields the host copies into the verify graph's buffers in baseline mode (everything the
# draft-to-verify boundary's "before" graph computes on the host).
_BASELINE_VERIFY_INPUTS = ("tokens", "positions", "slot_mapping", "kv_lens", "query_start_loc", "row_kv_lens",
                           "row_num_blocks", "row_last_block_len", "row_block_offsets", "max_kv_len",
                           "kv_split_len")
_BASELINE_DRAFT_INPUTS = ("accepted", "next_last_token", "next_seq_lens", "draft_positions", "draft_slots",
                          "hidden_rows")


class EngineError(ValueError):
    """Bad engine configuration or input (wrong batch, too little KV capacity, unknown mode)."""


@dataclass(frozen=True)
class StepTiming:
    """Device times of one step (microseconds, from CUDA events) and its host synchronizations."""

    draft_us: float        # draft graph
    verify_span_us: float  # end of the draft graph -> end of the verify graph (boundary + verify graph)
    gap_us: float          # end of the verify graph -> start of the next draft graph (read-back, host tail)
    host_syncs: int | None  # counted by torch.cuda's sync debug mode; None on the CPU


class _HostStamp:
    """A host clock reading with ``torch.cuda.Event``'s ``record`` / ``elapsed_time`` (ms), for the CPU."""

    def __init__(self):
        self.t = None

    def record(self) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, other: "_HostStamp") -> float:
        return (other.t - self.t) * 1e3


@dataclass
class RunResult:
    mode: str
    width: int
    batch: int
    outputs: list[list[int]]  # committed tokens per sequence
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    timings: list[StepTiming] = field(default_factory=list)
    elapsed_s: float = 0.0          # timed steps, first draft start -> last verification end
    timed_tokens: int = 0           # tokens committed in the timed steps (all sequences)
    lagged_event_waits: int = 0     # specgen: waits on a previous step's copy event
    runtime_stats: dict | None = None

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0


class OracleMix:
    """Drafts that equal the target's greedy token with probability ``p``, decided on the device.

    ``oracle[b, g]`` is sequence b's greedy token at generated index g (from
    ``greedy_generate``).  A draft at generated index ``g`` becomes the oracle
    token when ``u[b, g] < p`` and otherwise a different token, with ``u`` and
    the replacement drawn once from ``seed``; so a run's acceptance does not
    depend on the mode, and ``P(accept >= k) = p**k`` per step.
    """

    def __init__(self, p: float, oracle: torch.Tensor, vocab_size: int, seed: int = 0):
        if not 0.0 <= p <= 1.0:
            raise EngineError(f"acceptance p must lie in [0, 1], got {p}")
        gen = torch.Generator().manual_seed(seed)
        self.p = p
        self.oracle = oracle.long()
        shape = tuple(oracle.shape)
        self.hit = (torch.rand(shape, generator=gen) < p).to(oracle.device)
        self.other = ((self.oracle.cpu() + 1 + torch.randint(0, vocab_size - 1, shape, generator=gen))
                      % vocab_size).to(oracle.device)

    def apply(self, drafts: torch.Tensor, next_seq_lens: torch.Tensor, prompt_lens: torch.Tensor) -> torch.Tensor:
        """``drafts[B, K]`` for positions ``S' + 1 .. S' + K`` -> the mixed drafts (fixed shapes only)."""
        k = drafts.shape[1]
        idx = (next_seq_lens.long() - prompt_lens)[:, None] + torch.arange(1, k + 1, device=drafts.device)
        idx = idx.clamp(0, self.oracle.shape[1] - 1)
        pick = torch.where(self.hit.gather(1, idx), self.oracle.gather(1, idx), self.other.gather(1, idx))
        return pick.to(drafts.dtype)


def head_update(b: dict, block_size: int) -> None:
    """The draft-to-verify updates (token, metadata, attention tiling) as plain torch over step buffers."""
    ref.run_reference("spec_verify_head_update", b, block_size=block_size)


def verify_tail(b: dict, block_size: int) -> None:
    """Greedy acceptance and next-draft preparation as plain torch over step buffers."""
    ref.run_reference("greedy_prefix_verify", b, block_size=block_size)
    ref.run_reference("prepare_next_draft", b, block_size=block_size)


_COMPILED: dict[str, tuple] = {}


def _compiled(backend: str) -> tuple:
    """``head_update`` and ``verify_tail`` under ``torch.compile`` (one specialization per buffer shape)."""
    if backend not in _COMPILED:
        cfg = torch._dynamo.config
        name = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
        # every (batch, width) is its own static-shape graph; the default limit of 8 would quietly
        # send later shapes to eager execution
        setattr(cfg, name, max(getattr(cfg, name), 256))
        opts = dict(backend=backend, fullgraph=True, dynamic=False)
        _COMPILED[backend] = (torch.compile(head_update, **opts), torch.compile(verify_tail, **opts))
    return _COMPILED[backend]


class _Graph:
    """``fn()`` captured once in a CUDA graph (after a side-stream warm-up), or run eagerly on the CPU."""

    def __init__(self, fn: Callable[[], None], device: torch.device, pool=None, warmup: int = 2):
        self.fn = fn
        self.graph = DeviceAPI("cuda").capture(fn, device, pool, warmup) if device.type == "cuda" else None

    def __call__(self) -> None:
        if self.graph is None:
            self.fn()
        else:
            self.graph.replay()


class SpecDecodeEngine:
    """Greedy speculative decoding of ``batch`` prompts at verify width ``width``; see the module docstring."""

    def __init__(self, model: Qwen3Model, head: MTPHead, *, mode: str, width: int, batch: int,
                 block_size: int = 16, block_table_width: int = 32, library=None,
                 acceptance: OracleMix | None = None, compile_backend: str = "inductor"):
        if mode not in MODES:
            raise EngineError(f"unknown mode {mode!r}; one of {', '.join(MODES)}")
        if width < 2:
            raise EngineError(f"width must be at least 2 (one draft), got {width}")
        if batch < 1:
            raise EngineError(f"batch must be at least 1, got {batch}")
        if mode == "specgen" and library is None:
            raise EngineError("specgen mode needs a kernel library (specgen build ...)")
        self.model, self.head, self.mode = model, head, mode
        self.width, self.batch = int(width), int(batch)
        self.block_size, self.block_table_width = int(block_size), int(block_table_width)
        self.library, self.acceptance, self.compile_backend = library, acceptance, compile_backend
        self.device = model.embed_tokens.weight.device

    def close(self) -> None:
        """Drop the captured graphs, the runtime and the buffers now (they hold device memory)."""
        for name in ("draft_graph", "verify_graph", "runtime", "bufs", "h_bufs", "verify_hidden"):
            if hasattr(self, name):
                setattr(self, name, None)

    # ------------------------------------------------------------------ set-up
    @property
    def capacity(self) -> int:
        return self.block_table_width * self.block_size

    def _setup(self, prompts: list[list[int]], horizon: int) -> None:
        if len(prompts) != self.batch:
            raise EngineError(f"engine built for batch {self.batch}, got {len(prompts)} prompts")
        if any(len(p) == 0 for p in prompts):
            raise EngineError("every prompt needs at least one token")
        need = max(len(p) for p in prompts) + horizon
        if need > self.capacity:
            raise EngineError(f"a sequence may reach {need} positions but the block table holds "
                              f"{self.block_table_width} x {self.block_size} = {self.capacity}; raise "
                              f"block_table_width or lower the number of steps")
        B, W, BT, BS, dev = self.batch, self.width, self.block_table_width, self.block_size, self.device
        num_blocks = 1 + B * BT  # block 0 is the scratch block no sequence owns
        self.model.allocate_kv_cache(num_blocks, BS, block_table_width=BT)
        self.head.allocate_kv_cache(num_blocks, BS)
        # every block but the scratch block, shuffled so the tables are non-contiguous
        owned = [b for b in BlockAllocator(num_blocks, seed=0).allocate(num_blocks) if b != SCRATCH_BLOCK]
        self.block_table = torch.tensor(owned[: B * BT], dtype=I32, device=dev).view(B, BT)
        self.prompt_lens = torch.tensor([len(p) for p in prompts], device=dev)
        self.verify_hidden = torch.zeros(B * W, self.model.config.hidden_size,
                                         dtype=self.model.embed_tokens.weight.dtype, device=dev)
        self.runtime = None
        if self.mode == "specgen":
            caps = capabilities_of(self.model)
            backend = "cuda" if dev.type == "cuda" else "cpu"
            self.runtime = SpecVerifyRuntime(self.library, self._target_forward, caps, W, max_batch=B,
                                             backend=backend, device=dev, block_table_width=BT, block_size=BS,
                                             scratch_block=SCRATCH_BLOCK)
            try:
                self.bufs = self.runtime.buffers(B)
            except LookupError as e:
                raise EngineError(f"specgen mode: the runtime has no fast path here ({e}); "
                                  f"build the variants for w{W}_bt{BT}_bs{BS}") from None
        else:
            self.bufs = alloc_step_buffers(B, W, BT, block_size=BS, scratch_block=SCRATCH_BLOCK, device=dev)
        self.bufs["block_table"].copy_(self.block_table)
        self.pool = torch.cuda.graph_pool_handle() if dev.type == "cuda" else None

    def _prefill(self, prompts: list[list[int]]) -> torch.Tensor:
        """Target and draft prefill; leaves the first draft graph's inputs in the buffers."""
        B, W, BS, dev, bt = self.batch, self.width, self.block_size, self.device, self.block_table
        r = max(len(p) for p in prompts)
        toks = torch.tensor([p + [0] * (r - len(p)) for p in prompts], device=dev)
        idx = torch.arange(r, device=dev)
        pos = idx.expand(B, r)
        valid = idx < self.prompt_lens[:, None]
        slots = torch.where(valid, slot(bt, pos, BS), torch.full_like(pos, -1))
        qsl = torch.arange(B + 1, device=dev) * r
        hidden, logits = self.model(toks.reshape(-1), pos.reshape(-1), slots.reshape(-1), bt, self.prompt_lens,
                                    qsl, r)
        last = torch.arange(B, device=dev) * r + self.prompt_lens - 1
        bonus = logits[last].argmax(-1)
        if r > 1:  # draft prefill: token at p = 1 .. P-1 with the target hidden of p - 1
            dtoks = torch.tensor([p[1:] + [0] * (r - len(p) + 1) for p in prompts], device=dev)
            dpos = (idx + 1).expand(B, r)
            dslots = torch.where(idx < (self.prompt_lens - 1)[:, None], slot(bt, dpos, BS),
                                 torch.full_like(dpos, -1))
            self.head(dtoks.reshape(-1), dpos.reshape(-1), dslots.reshape(-1), hidden, bt, self.prompt_lens, qsl, r)
        # The first draft graph input: row 1 is the bonus at position P with the hidden of P - 1.
        b = self.bufs
        base = torch.arange(B, device=dev) * W
        P = self.prompt_lens.to(I32)
        self.verify_hidden[base] = hidden[last]
        b["tokens"][base] = torch.tensor([p[-1] for p in prompts], dtype=I32, device=dev)
        b["accepted"].zero_()
        b["next_last_token"].copy_(bonus)
        b["next_seq_lens"].copy_(P)
        b["draft_positions"].copy_(torch.stack([P - 1, P], 1))
        b["draft_slots"].copy_(torch.stack([b["scratch_slot"].expand(B), ref.slot(bt, P, BS)], 1))
        b["hidden_rows"].copy_(torch.stack([base, base], 1))
        return bonus

    # -------------------------------------------------------------- the graphs
    def _target_forward(self, bufs) -> torch.Tensor:
        hidden, logits = self.model(bufs["tokens"], bufs["positions"], bufs["slot_mapping"], bufs["block_table"],
                                    bufs["kv_lens"], bufs["query_start_loc"], self.width)
        self.verify_hidden[: hidden.shape[0]].copy_(hidden)
        return logits.argmax(-1).to(I32).view(-1, self.width)

    def _draft(self) -> None:
        """The MTP head over ``prepare_next_draft``'s two rows, then the chain; writes the next step's inputs."""
        b, B, W, BS, bt = self.bufs, self.batch, self.width, self.block_size, self.bufs["block_table"]
        dev = bt.device
        acc = b["accepted"].long()
        base = torch.arange(B, device=dev) * W
        toks = torch.stack([b["tokens"][base + acc], b["next_last_token"]], 1).reshape(-1)
        hid = self.verify_hidden[b["hidden_rows"].reshape(-1).long()]
        new_len = b["next_seq_lens"]
        h, logits = self.head(toks, b["draft_positions"].reshape(-1), b["draft_slots"].reshape(-1), hid, bt,
                              new_len + 1, torch.arange(B + 1, device=dev) * 2, 2)
        d, h = logits.view(B, 2, -1)[:, 1].argmax(-1), h.view(B, 2, -1)[:, 1]
        drafts, pos, qsl = [d], new_len, torch.arange(B + 1, device=dev)
        for _ in range(W - 2):
            pos = pos + 1
            h, logits = self.head(d, pos, slot(bt, pos[:, None], BS).reshape(-1), h, bt, pos + 1, qsl, 1)
            d = logits.argmax(-1)
            drafts.append(d)
        out = torch.stack(drafts, 1)
        if self.acceptance is not None:
            out = self.acceptance.apply(out, new_len, self.prompt_lens)
        b["draft_tokens"].copy_(out)
        b["last_tokens"].copy_(b["next_last_token"])
        b["seq_lens"].copy_(new_len)

    def _forward_only(self) -> None:
        self.bufs["target_tokens"].copy_(self._target_forward(self.bufs))

    def _build_graphs(self) -> None:
        """Capture the draft graph and the mode's verify graph, leaving the step state as it was.

        Capture warms each graph up by running it, and a compile-mode verify
        graph writes the next draft's inputs; the snapshot undoes that.  (The
        KV entries the warm-ups write are the ones the first step rewrites
        with the same values.)
        """
        with self._state_kept():
            self._capture_graphs(self.device)

    @contextlib.contextmanager
    def _state_kept(self):
        """Restore the step buffers and the verify hidden states on exit."""
        saved = {n: t.clone() for n, t in self.bufs.items()}
        saved_hidden = self.verify_hidden.clone()
        try:
            yield
        finally:
            for n, t in saved.items():
                self.bufs[n].copy_(t)
            self.verify_hidden.copy_(saved_hidden)

    def _capture_graphs(self, dev) -> None:
        self.draft_graph = _Graph(self._draft, dev, self.pool)
        if self.runtime is not None:  # after the draft warm-up wrote the verify inputs
            self.runtime.capture(self.batch)
        if self.mode == "baseline":
            self.verify_graph = _Graph(self._forward_only, dev, self.pool)
        elif self.mode == "compile":
            head, tail = _compiled(self.compile_backend)
            bufs, bs = self.bufs, self.block_size

            def verify():
                head(bufs, bs)
                self._forward_only()
                tail(bufs, bs)
            self.verify_graph = _Graph(verify, dev, self.pool)
        # specgen: the runtime captures its own verify graph on the first step

    # -------------------------------------------------------------- the steps
    def _host_state(self, bonus: torch.Tensor) -> None:
        self.h_last = bonus.to(I32).cpu()
        self.h_seq = self.prompt_lens.to(I32).cpu()
        self.h_bufs = alloc_step_buffers(self.batch, self.width, self.block_table_width, block_size=self.block_size,
                                         scratch_block=SCRATCH_BLOCK)
        self.h_bufs["block_table"].copy_(self.block_table.cpu())
        if self.device.type == "cuda":  # pinned staging, so the H2D copies are asynchronous
            self.h_bufs = {n: t.pin_memory() for n, t in self.h_bufs.items()}

    def _baseline_boundary_in(self) -> None:
        """Draft -> verify, host-serial: sync, stack and cast, metadata and tiling on the host, H2D copies."""
        h, BS = self.h_bufs, self.block_size
        h["draft_tokens"].copy_(self.bufs["draft_tokens"].cpu())  # synchronizes
        h["last_tokens"].copy_(self.h_last)
        h["seq_lens"].copy_(self.h_seq)
        head_update(h, BS)
        for n in _BASELINE_VERIFY_INPUTS:
            self.bufs[n].copy_(h[n], non_blocking=True)
        self.bufs["draft_tokens"].copy_(h["draft_tokens"], non_blocking=True)

    def _baseline_boundary_out(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Verify -> draft, host-serial: sync, acceptance and next-draft inputs on the host, H2D copies."""
        h = self.h_bufs
        h["target_tokens"].copy_(self.bufs["target_tokens"].cpu())  # synchronizes
        verify_tail(h, self.block_size)
        for n in _BASELINE_DRAFT_INPUTS:
            self.bufs[n].copy_(h[n], non_blocking=True)
        self.h_last, self.h_seq = h["next_last_token"].clone(), h["next_seq_lens"].clone()
        return h["accepted"].clone(), h["next_tokens"].clone()

    # ------------------------------------------------------------------- run
    @torch.inference_mode()
    def run(self, prompts: list[list[int]], *, max_new_tokens: int | None = None, steps: int | None = None,
            warmup_steps: int = 0, timing: bool = False) -> RunResult:
        """Decode ``prompts`` until every sequence has ``max_new_tokens`` tokens, or for ``steps`` steps.

        The block table is sized for the slowest sequence.  One that finishes
        early keeps stepping with the batch and may pass the table's end;
        those steps fail the variants' guards and run on the (exact) torch
        references, and its extra tokens are dropped.

        ``warmup_steps`` run first (captures, compilation) and are neither
        timed nor counted; their tokens are part of ``outputs``.
        """
        if (max_new_tokens is None) == (steps is None):
            raise EngineError("give exactly one of max_new_tokens and steps")
        W = self.width
        total_steps = None if steps is None else warmup_steps + steps
        horizon = (max_new_tokens + 3 * W if steps is None else (total_steps + 2) * W) + 1
        self._setup(prompts, horizon)
        bonus = self._prefill(prompts)
        self._host_state(bonus)
        self._build_graphs()
        res = RunResult(self.mode, W, self.batch, [[t] for t in bonus.tolist()])
        cuda = self.device.type == "cuda" and timing
        stamp = (lambda: torch.cuda.Event(enable_timing=True)) if cuda else _HostStamp
        events: list[tuple] = []
        sync_counts: list[int] = []
        pending: tuple | None = None  # specgen: (step index, timed) whose host result is still to be read
        lagged = self.mode == "specgen" and self.device.type != "cpu"
        prompt_lens = self.prompt_lens.tolist()
        t0 = None
        i = 0

        def done() -> bool:  # specgen knows a step's tokens one step late, so it may run one step more
            if total_steps is not None:
                return i >= total_steps
            return min(len(o) for o in res.outputs) >= max_new_tokens

        while not done():
            timed = i >= warmup_steps
            if timed and t0 is None:
                if self.device.type == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
            count_syncs = cuda and timed
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                if count_syncs:
                    debug_mode = torch.cuda.get_sync_debug_mode()
                    torch.cuda.set_sync_debug_mode("warn")
                try:
                    # stamps: draft start, draft end, verify graph launched (before any read-back or
                    # host tail, which count towards the verify->draft gap), step end
                    ev = [stamp() for _ in range(4)] if timing and timed else None
                    if ev:
                        ev[0].record()
                    self.draft_graph()
                    if ev:
                        ev[1].record()
                    commit = self._verify_step(*self._bounds(res, prompt_lens, lagged and i > 0),
                                               mark=ev[2].record if ev else None)
                    if lagged:
                        # enqueue step i, then read step i - 1 (reference 004's one-step-late read)
                        if pending is not None:
                            self._commit(res, self._specgen_host(1), pending[1], max_new_tokens)
                            res.lagged_event_waits += pending[1]
                        pending = (i, timed)
                    else:
                        self._commit(res, commit, timed, max_new_tokens)
                    if ev:
                        ev[3].record()
                finally:
                    if count_syncs:
                        torch.cuda.set_sync_debug_mode(debug_mode)
            syncs = [w for w in caught if count_syncs and "synchronizing CUDA operation" in str(w.message)]
            for w in caught:  # everything else goes on to the caller's filters
                if not any(w is x for x in syncs):
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            if ev:
                events.append(ev)
                sync_counts.append(len(syncs) if cuda else None)
            i += 1
        if pending is not None:
            self._commit(res, self._specgen_host(0), pending[1], max_new_tokens)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        if t0 is not None:
            res.elapsed_s = time.perf_counter() - t0
        if events:
            res.elapsed_s = events[0][0].elapsed_time(events[-1][3]) / 1e3
            for k, (e0, e1, e2, _) in enumerate(events):
                gap = e2.elapsed_time(events[k + 1][0]) * 1e3 if k + 1 < len(events) else float("nan")
                res.timings.append(StepTiming(e0.elapsed_time(e1) * 1e3, e1.elapsed_time(e2) * 1e3, gap,
                                              sync_counts[k]))
        if self.runtime is not None:
            res.runtime_stats = self.runtime.stats()
        if max_new_tokens is not None:
            res.outputs = [o[:max_new_tokens] for o in res.outputs]
        return res

    def _bounds(self, res: RunResult, prompt_lens: list[int], one_step_behind: bool) -> tuple[int, int]:
        """Host-side bounds of this step's ``seq_lens`` from the tokens committed so far.

        After the commits the host has seen, sequence b holds ``P + n - 1``
        tokens of KV (``n`` committed, the newest not yet in the cache); one
        unseen step adds between 1 and ``W`` to that.
        """
        base = [p + len(o) - 1 for p, o in zip(prompt_lens, res.outputs)]
        if one_step_behind:
            return min(base) + 1, max(base) + self.width
        return min(base), max(base)

    def _verify_step(self, lo: int, hi: int, mark: Callable[[], None] | None = None):
        """Cross the draft->verify boundary, launch the verification, ``mark()``, then the host's part."""
        mark = mark or (lambda: None)
        if self.mode == "baseline":
            self._baseline_boundary_in()
            self.verify_graph()
            mark()
            return self._baseline_boundary_out()
        if self.mode == "compile":
            self.verify_graph()
            mark()
            # one read-back that synchronizes, as gpt-fast's; next_tokens is -1 past the bonus
            next_tokens = self.bufs["next_tokens"].cpu()
            return (next_tokens >= 0).sum(1) - 1, next_tokens
        result = self.runtime.step_in_place(self.batch, (lo, hi))
        mark()
        if self.device.type == "cpu":  # eager: nothing is in flight, the step's results are final
            return result.accepted.clone(), result.next_tokens.clone()
        return None

    def _specgen_host(self, steps_back: int):
        host = self.runtime.host_result(steps_back)
        return host.accepted.clone(), host.next_tokens.clone()

    def _commit(self, res: RunResult, commit, timed: bool, max_new_tokens: int | None) -> None:
        accepted, next_tokens = commit
        acc = accepted.tolist()
        rows = next_tokens.tolist()
        res.steps += timed
        for o, a, row in zip(res.outputs, acc, rows):
            room = (a + 1) if max_new_tokens is None else max(0, min(a + 1, max_new_tokens - len(o)))
            if max_new_tokens is None or len(o) < max_new_tokens:
                res.drafted += self.width - 1
                res.accepted += a
            if timed:
                res.timed_tokens += room  # a finished sequence's extra tokens are not output
            o.extend(row[: a + 1])

    @torch.inference_mode()
    def bare_verify_us(self, repeats: int = 50) -> float:
        """The target forward alone (a captured graph on CUDA) in the decode loop's rhythm.

        Each repeat replays the draft graph, then the bare verify graph, and
        times the span from the end of the draft to the end of the
        verification, exactly like a step's ``verify_span_us``, so a mode's
        ``verify_span_us - bare_verify_us`` is its draft-to-verify boundary
        (graph switches and launch gaps included on both sides).  Median of
        ``repeats``.  The step buffers are restored afterwards; the KV entries
        written are the last verification's (same values) and the next
        draft's (which the next step writes again).
        """
        cuda = self.device.type == "cuda"
        stamp = (lambda: torch.cuda.Event(enable_timing=True)) if cuda else _HostStamp
        with self._state_kept():
            return self._time_bare(repeats, cuda, stamp)

    def _time_bare(self, repeats: int, cuda: bool, stamp) -> float:
        with torch.inference_mode():
            g = _Graph(self._forward_only, self.device, self.pool)
            spans = []
            for _ in range(repeats):
                s, e = stamp(), stamp()
                self.draft_graph()
                s.record()
                g()
                e.record()
                spans.append((s, e))
            if cuda:
                torch.cuda.synchronize()
        return median(s.elapsed_time(e) * 1e3 for s, e in spans)

