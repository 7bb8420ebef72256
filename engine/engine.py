"""One speculative decode loop (target + a draft behind the proposer seam), with pluggable ways to cross its boundaries.

``SpecDecodeEngine`` runs greedy speculative decoding for a fixed batch ``B`` and verify width ``W``
(draft depth ``W - 1``) over a paged KV cache whose block 0 is the scratch block.  What drafts is a
proposer (``engine/proposers/``: the MTP chain, a DFlash / DSpark block); every mode runs the same
captured draft graph (the proposer's ``carry`` and ``propose``) and the same target forward; they
differ only in how each boundary is crossed, which the mode classes of ``engine/modes/`` own
(``baseline``: host-serial, two host synchronizations per step; ``compile``: ``torch.compile``'d
updates in the verify graph, one; ``specgen``: the built kernel variants in ``SpecVerifyRuntime``'s
step graph, none).  A mode whose ``fuses_draft`` is set runs the draft inside its own step graph
(``specgen``, ``inductor``): one graph replay per step, no graph switch between the draft and the
verification.  A draft that would keep its own graph (a block draft with side streams) runs at the
end of ``specgen``'s step graph instead (``draft_at_end``, the default; ``trails_draft``): the step
graph drafts for the next step, so after the first step no draft graph is launched and no graph
switch sits between the verification and the next draft (``draft_at_end=False``: a draft graph before each step).

On the CPU the graphs run eagerly (``compile`` mode takes ``compile_backend``, e.g. ``"eager"`` in tests).
``run`` returns the tokens, the acceptance and, with ``timing=True`` on CUDA, per-step CUDA-event timings
and host synchronization counts; ``capture_s`` is how long capturing the run's graphs took.  With
``profile=True`` the steps after the warm-up run under ``torch.profiler`` with their draft and verify phases
marked (``profiling.StepProfiler``); the trace lands in ``RunResult.trace``.

``engine.observer``, when set, is called around every decode step: ``observer.before_step(engine, i)``
before its draft graph (a trailing draft of step ``i > 0`` ran at the end of step ``i - 1``) and
``observer.after_step(engine, i)`` once the step is enqueued and committed (outside the timed and
sync-counted span).  Tests inject faults into the step buffers and inspect the KV caches there.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

import torch

from ..models.errors import EngineError
from ..models.paged_kv import BlockAllocator
from ..models.qwen3 import Qwen3Model
from .acceptance import AcceptanceMix
from .clock import StepClock, count_host_syncs, wall_seconds
from .graphs import CapturedGraph
from .linear_state import LinearState, has_linear_state
from .modes import MODES
from .modes.base import Commit, Mode
from .profiling import StepProfiler
from .proposers import Proposer, proposer_for
from .results import RunResult, StepTiming
from .sampling import DRAFT_SAMPLING, EngineSampling, SamplingParams, sampling_rows

__all__ = ["MODES", "EngineError", "RunResult", "SpecDecodeEngine", "StepTiming"]

I32 = torch.int32
SCRATCH_BLOCK = 0


@dataclass(frozen=True)
class _Budget:
    """How long a run decodes: ``max_new_tokens`` per sequence, or ``warmup + steps`` steps."""

    max_new_tokens: int | None
    total_steps: int | None
    warmup_steps: int

    @classmethod
    def of(cls, max_new_tokens: int | None, steps: int | None, warmup_steps: int) -> "_Budget":
        if (max_new_tokens is None) == (steps is None):
            raise EngineError("give exactly one of max_new_tokens and steps")
        return cls(max_new_tokens, None if steps is None else warmup_steps + steps, warmup_steps)

    def horizon(self, width: int) -> int:
        """Positions past the prompt a sequence may reach (a lagged mode may run one step more)."""
        if self.total_steps is None:
            return self.max_new_tokens + 3 * width + 1
        return (self.total_steps + 2) * width + 1

    def done(self, i: int, outputs: list[list[int]]) -> bool:
        if self.total_steps is not None:
            return i >= self.total_steps
        return min(len(o) for o in outputs) >= self.max_new_tokens


class SpecDecodeEngine:
    """Speculative decoding of ``batch`` prompts at verify width ``width``, greedy or sampled (``sampling``,
    ``engine/sampling.py``; ``draft_sampling``: ``"sample"``, a draft that samples draws from its own filtered
    distribution, or ``"argmax"``, it proposes its argmax, one-hot); see the module docstring."""

    scratch_block = SCRATCH_BLOCK

    def __init__(
        self,
        model: Qwen3Model,
        draft: Proposer | torch.nn.Module,
        *,
        mode: str,
        width: int,
        batch: int,
        block_size: int = 16,
        block_table_width: int = 32,
        library=None,
        acceptance: AcceptanceMix | None = None,
        compile_backend: str = "inductor",
        rank_check=None,
        device_guard: bool = True,
        side_streams: bool = True,
        mapped_mirror: bool | None = None,
        draft_at_end: bool | None = None,
        sampling: SamplingParams | list[SamplingParams] | None = None,
        draft_sampling: str = "sample",
    ):
        self.proposer = proposer_for(draft)
        runs = self.proposer.modes(MODES)
        if mode not in runs:
            known = "unknown" if mode not in MODES else f"the {type(self.proposer).__name__} draft has no"
            raise EngineError(f"{known} mode {mode!r}; one of {', '.join(runs)}")
        if width < 2:
            raise EngineError(f"width must be at least 2 (one draft), got {width}")
        if batch < 1:
            raise EngineError(f"batch must be at least 1, got {batch}")
        if MODES[mode].needs_library and library is None:
            raise EngineError(f"{mode} mode needs a kernel library (specgen build ...)")
        self.model, self.head, self.mode = model, self.proposer.module, mode
        self.width, self.batch = int(width), int(batch)
        self.block_size, self.block_table_width = int(block_size), int(block_table_width)
        self.library, self.acceptance, self.compile_backend = library, acceptance, compile_backend
        self.rank_check = rank_check  # tensor-parallel debug: rank_check.RankCheck, called after every step
        self.device_guard = bool(device_guard)  # False: the runtime modes' verify graphs run without the device guard
        self.side_streams = bool(side_streams)  # False: specgen's step graphs on one stream (no fork or event wait)
        self.mapped_mirror = mapped_mirror  # the runtime's host copies through mapped memory; None: its default
        # specgen: a block draft runs at the step graph's end, for the next step (None: wherever the draft can)
        self.draft_at_end = self.proposer.can_trail if draft_at_end is None else bool(draft_at_end)
        if draft_at_end and mode == "specgen" and not self.proposer.can_trail:
            raise EngineError(
                f"draft_at_end: the {type(self.proposer).__name__} draft cannot run at the end of the step graph "
                "(an MTP chain runs at its head)"
            )
        self.device = model.embed_tokens.weight.device
        self.linear_state = has_linear_state(model)  # a hybrid target (engine/linear_state.py)
        self.state: LinearState | None = None
        self.proposer.bind(self)
        if draft_sampling not in DRAFT_SAMPLING:
            raise EngineError(f"draft_sampling must be one of {', '.join(DRAFT_SAMPLING)}, got {draft_sampling!r}")
        rows = sampling_rows(sampling, self.batch)  # None: greedy verification, as without sampling
        self.sampling = EngineSampling(self, rows, draft_sampling) if rows is not None else None
        self.strategy: Mode = MODES[mode](self)
        self.observer = None  # before_step(engine, i) / after_step(engine, i); see the module docstring

    def close(self) -> None:
        """Drop the captured graphs, the runtime and the buffers now (they hold device memory)."""
        self.strategy.close()
        self.proposer.release()
        for name in ("draft_graph", "bufs", "verify_hidden"):
            if hasattr(self, name):
                setattr(self, name, None)
        self.release_caches()
        if self.sampling is not None:
            self.sampling.logits = self.sampling.dists = None

    def release_caches(self) -> None:
        """Drop the target's and the draft's paged KV caches (the model keeps its last cache until then)."""
        for module in (self.model, getattr(self.proposer, "module", None)):
            if getattr(module, "kv_cache", None) is not None:
                module.kv_cache = None

    def set_sampling(self, sampling: SamplingParams | list[SamplingParams]) -> None:
        """New sampling parameters (one for every row, or one per row), from the next step on: written in place
        into the buffers the graphs read, so nothing is recaptured.  The engine must sample (``sampling=``)."""
        if self.sampling is None:
            raise EngineError("this engine verifies greedily; build it with sampling=... to change its parameters")
        rows = sampling_rows(sampling, self.batch)
        if getattr(self, "bufs", None) is None:
            self.sampling.params = rows
        else:
            self.sampling.write(rows)

    @property
    def capacity(self) -> int:
        return self.block_table_width * self.block_size

    @property
    def draft_rows(self) -> int:
        """Rows of one draft forward."""
        return self.proposer.rows(self.width - 1)

    def _setup(self, prompts: list[list[int]], horizon: int) -> None:
        if len(prompts) != self.batch:
            raise EngineError(f"engine built for batch {self.batch}, got {len(prompts)} prompts")
        if any(len(p) == 0 for p in prompts):
            raise EngineError("every prompt needs at least one token")
        need = max(len(p) for p in prompts) + horizon
        if need > self.capacity:
            raise EngineError(
                f"a sequence may reach {need} positions but the block table holds "
                f"{self.block_table_width} x {self.block_size} = {self.capacity}; raise "
                f"block_table_width or lower the number of steps"
            )
        B, BT, BS, dev = self.batch, self.block_table_width, self.block_size, self.device
        # the blocks a sequence can reach, not the whole table: the cache grows with the run, not the layout
        per_seq = min(BT, -(-need // BS))
        num_blocks = 1 + B * per_seq  # block 0 is the scratch block no sequence owns
        self.release_caches()  # an earlier run's cache goes before this one is allocated
        self.model.allocate_kv_cache(num_blocks, BS, block_table_width=BT)
        self.proposer.allocate(num_blocks, BS)
        # every block but the scratch block, shuffled so the tables are non-contiguous; the entries past what a
        # sequence reaches repeat its last block (no position maps them; any read of one stays in the cache)
        owned = [b for b in BlockAllocator(num_blocks, seed=0).allocate(num_blocks) if b != SCRATCH_BLOCK]
        table = torch.tensor(owned[: B * per_seq], dtype=I32, device=dev).view(B, per_seq)
        self.block_table = torch.cat([table, table[:, -1:].expand(B, BT - per_seq)], dim=1)
        self.prompt_lens = torch.tensor([len(p) for p in prompts], device=dev)
        self.verify_hidden = self.proposer.alloc_hidden()
        self.bufs = self.strategy.buffers()
        self.bufs["block_table"].copy_(self.block_table)
        if self.linear_state:
            self.state = LinearState(self.model, B, self.width, dev)
            self.bufs["state_slots"].copy_(self.state.slots)
        if self.sampling is not None:
            self.sampling.setup()
        self.pool = torch.cuda.graph_pool_handle() if dev.type == "cuda" else None

    def _prefill(self, prompts: list[list[int]]) -> torch.Tensor:
        """Target and draft prefill (the proposer's); leaves the first draft graph's inputs in the buffers."""
        return self.proposer.prefill(prompts)

    def call_target(
        self, *args, taps: tuple[int, ...] = (), prefill_lens=None, step_bufs=None, logit_rows=None, on_taps=None
    ):
        """``model(tokens, positions, slots, block_table, kv_lens, query_start_loc, rows)`` plus, for a
        hybrid target, the linear state's slots: a prefill's (``prefill_lens``, the prompts' lengths) or
        those the verify step's head wrote into ``step_bufs``; ``logit_rows``: the rows the LM head runs over;
        ``on_taps``: called with the taps as soon as the forward has them (and ``EngineSampling.verify_kwargs``)."""
        kw = {"taps": taps} if taps else {}
        if on_taps is not None:
            kw["on_taps"] = on_taps
        if logit_rows is not None:
            kw["logit_rows"] = logit_rows
        elif step_bufs is not None and self.sampling is not None:  # the LM head writes the vocabulary pass's rows
            kw |= self.sampling.verify_kwargs(args[0].shape[0])
        if self.state is not None:
            if prefill_lens is not None:
                kw |= self.state.prefill_kwargs(prefill_lens, args[6])
            else:
                kw |= self.state.verify_kwargs(step_bufs)
        return self.model(*args, **kw)

    def target_forward(self, bufs) -> torch.Tensor:
        """The target over the verify rows of ``bufs``, keeping what the draft reads; returns ``target[B, W]``."""
        return self.proposer.target_forward(bufs)

    def forward_only(self) -> None:
        """The bare verification: the target forward (into ``target_tokens``; a sampling engine's forward keeps its
        logits instead, for the vocabulary pass), no boundary work."""
        out, dst = self.target_forward(self.bufs), self.bufs["target_tokens"]
        if out.data_ptr() != dst.data_ptr() or out.dtype != dst.dtype:  # the forward may write it in place
            dst.copy_(out.reshape(dst.shape))

    def graph(self, fn: Callable[[], None]) -> CapturedGraph:
        """``fn`` as a captured graph in the engine's pool (eager on the CPU)."""
        return CapturedGraph(fn, self.device, self.pool)

    def _draft(self) -> None:
        """The draft graph's body: the step's carried inputs, then the drafts."""
        self.proposer.carry()
        self.proposer.propose()

    def _build_graphs(self) -> None:
        """Capture the draft graph and the mode's verify graph, leaving the step state as it was.

        Capture warms each graph up by running it, and a compile-mode verify graph writes the next draft's
        inputs; the snapshot undoes that.  (The KV entries the warm-ups write are the ones the first step
        rewrites with the same values.)
        """
        with self.state_kept():
            self.draft_graph = self.graph(self._draft)
            self.strategy.capture()

    @contextlib.contextmanager
    def state_kept(self):
        """Restore the step buffers, the verify hidden states and a hybrid's linear state on exit."""
        saved = {n: t.clone() for n, t in self.bufs.items()}
        saved_hidden = self.verify_hidden.clone()
        saved_state = self.state.snapshot() if self.state is not None else None  # a warm-up rewrites it
        try:
            yield
        finally:
            for n, t in saved.items():
                self.bufs[n].copy_(t)
            self.verify_hidden.copy_(saved_hidden)
            if saved_state is not None:
                self.state.restore(saved_state)

    @torch.inference_mode()
    def run(
        self,
        prompts: list[list[int]],
        *,
        max_new_tokens: int | None = None,
        steps: int | None = None,
        warmup_steps: int = 0,
        timing: bool = False,
        profile: bool = False,
    ) -> RunResult:
        """Decode ``prompts`` until every sequence has ``max_new_tokens`` tokens, or for ``steps`` steps.

        The block table is sized for the slowest sequence.  One that finishes early keeps stepping with the
        batch and may pass the table's end; those steps fail the variants' guards and run on the (exact)
        torch semantics, and its extra tokens are dropped.

        ``warmup_steps`` run first (captures, compilation) and are neither
        timed nor counted; their tokens are part of ``outputs``.  ``profile``:
        the steps after them run under ``torch.profiler`` (see the module docstring).
        """
        budget = _Budget.of(max_new_tokens, steps, warmup_steps)
        self._setup(prompts, budget.horizon(self.width))
        bonus = self._prefill(prompts)
        self.strategy.after_prefill(bonus)
        with wall_seconds(self.device) as capture:
            self._build_graphs()
        res = RunResult(
            self.mode,
            self.width,
            self.batch,
            [[t] for t in bonus.tolist()],
            capture_s=capture.s,
            fused_draft=self.strategy.fuses_draft or self.strategy.trails_draft,
        )
        clock = StepClock(self.device, timing, turnaround=timing and not profile)
        self.strategy.synced_ns = None  # nothing a previous run stamped
        with StepProfiler(self.device, warmup_steps if profile else None) as prof:
            self._loop(res, budget, clock, prof)
        res.trace = prof.trace
        clock.finish(res)
        res.runtime_stats = self.strategy.stats()
        if max_new_tokens is not None:
            res.outputs = [o[:max_new_tokens] for o in res.outputs]
        return res

    def _loop(self, res: RunResult, budget: _Budget, clock: StepClock, prof: StepProfiler) -> None:
        """The decode steps; a lagged mode knows a step's tokens one step late, so it may run one step more."""
        lagged = self.strategy.lagged
        prompt_lens = self.prompt_lens.tolist()
        pending: bool | None = None  # lagged: whether the step not yet read back was timed
        i = 0
        while not budget.done(i, res.outputs):
            timed = i >= budget.warmup_steps
            if self.observer is not None:
                self.observer.before_step(self, i)
            prof.at(i)
            clock.start(timed)
            with count_host_syncs(clock.counts_syncs(timed)) as syncs:
                stamps = clock.step(timed)
                stamps.mark(0)
                with prof.phase("draft", i):
                    clock.turnaround(self.strategy, res, timed)  # the host's own work since the last verification's
                    # else the mode's step graph runs the draft: at its head, or at the previous step's end
                    if not self.strategy.fuses_draft and not (self.strategy.trails_draft and i > 0):
                        self.draft_graph()
                stamps.mark(1)
                with prof.phase("verify", i):
                    commit = self.strategy.verify(
                        *self._bounds(res, prompt_lens, lagged and i > 0), mark=lambda: stamps.mark(2)
                    )
                if lagged:
                    # enqueue step i, then read step i - 1 (the one-step-late read)
                    self._read_lagged(res, pending, 1, budget.max_new_tokens)
                    pending = timed
                else:
                    self._commit(res, commit, timed, budget.max_new_tokens)
                stamps.mark(3)
            clock.record(stamps, syncs)
            if self.rank_check is not None:  # outside the counted step: it reads the state back
                self.rank_check(self, i, res.outputs)
            if self.observer is not None:
                self.observer.after_step(self, i)
            i += 1
        self._read_lagged(res, pending, 0, budget.max_new_tokens)

    def _read_lagged(self, res: RunResult, pending: bool | None, steps_back: int, max_new_tokens: int | None) -> None:
        """Commit the step still in flight (``steps_back`` steps before the newest), if there is one."""
        if pending is None:
            return
        self._commit(res, self.strategy.read_back(steps_back), pending, max_new_tokens)
        if steps_back:
            res.lagged_event_waits += pending

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

    @staticmethod
    def _commit(res: RunResult, commit: Commit, timed: bool, max_new_tokens: int | None) -> None:
        accepted, next_tokens = commit
        res.commit(accepted.tolist(), next_tokens.tolist(), timed, max_new_tokens)
