"""The serving loop: continuous batching of requests over the engine's speculative decode step.

``ServingLoop`` puts the plain-data scheduler (``scheduler.py``) beside the decode
machinery of ``SpecDecodeEngine``: the same target, proposer (MTP, DFlash, DSpark),
boundary mode and step buffers, driven one iteration at a time over whichever requests are running::

    loop = ServingLoop(model, head, mode="specgen", depth=3, max_batch=8, num_blocks=24,
                       block_size=16, block_table_width=8, max_prefill_tokens=64, kernels=lib)
    run = loop.run(Workload(num_requests=100, rate=20.0).requests())   # or a ClosedLoop
    run.metrics()["output_tokens_per_s"], loop.requests[0].output

Each iteration:

1. ``Scheduler.schedule(now)``: running requests first (the next prefill chunk or a
   verify step), preemption of the newest when blocks run out, then admissions of
   requests that arrived (``now >= arrival``);
2. every prefill chunk runs through the target (one forward per chunk over the request's own blocks) and
   the draft (``prefill.py``; on a GPU a graph replay up to 512 rows: ``prefill_graphs.py``); the last
   chunk gives the request's next token and its first step's state;
3. one speculative decode step over the running requests past their prefill (``decode.py``; a block
   draft's own forward first), after their per-row state is moved to the step's row order on the device
   by the family ``spec_batch_row_remap`` (``remap.py``; its torch semantics outside ``specgen``): rows that
   stay from the last step's rows, rows that join from their prefill's (or their parking) slot;
4. ``Scheduler.update`` with the committed tokens, cut at a stop token or the budget (``Request.append``),
   then ``Scheduler.complete`` for the steps known finished: the blocks of a finished or preempted request
   go back to the pool only then (``BlockPool.retire``); ``complete_lag`` holds completion back that many
   more steps after the read (what a device with steps in flight does), so the lagged release is exercised
   on the CPU too.

The modes: ``baseline`` (plain step buffers per row count and their host copies; on a GPU a verify
graph per row count), ``compile`` (plain step buffers of the runtime's bucket sizes, a step padded to the
smallest that holds it, ``CompileMode.verify_body``'s graph per bucket), both captured at set-up
(``row_graphs.py``); ``specgen`` and ``inductor`` (``SpecVerifyRuntime``'s buckets, each captured at
set-up; ``inductor``'s rows move by the remap's torch semantics).  On the CPU ``compile`` and ``inductor``
run eagerly, compiled by ``compile_backend`` (``"eager"`` in the tests).

``sampling=True``: requests carry their own ``SamplingParams`` (``sampling.py``), greedy and sampled ones
in one batch, each giving what a lone sampling engine gives for its prompt.

``read_lag=1`` reads each step's tokens one step late, as the engine's lockstep loop does: step ``k + 1``
is scheduled and launched from the row state step ``k`` left on the device before step ``k``'s tokens reach
the scheduler (on a device, from the runtime's pinned copy of step ``k``); what that means for tables,
finishing and preempted requests: docs/engine.md, "Reading tokens one step late".  Outside ``baseline``
(whose host copies need it) a prefill's token is read one step late as well (``late_first``): the
request's first verify step is launched from the prefill's state on the device before the host knows
the token, so a join costs the device no wait (``prefill.FirstToken``).

A preempted request's prefix (prompt and output so far) is prefilled again when it is readmitted; its
blocks may be handed to another request only once every step that could write them completed.  A hybrid
target's linear-state slots are the request's too (``StateSlots``: ``W`` per request, written into its
row's ``state_slots`` each step, released like its blocks; a prefill starts from the zero state).

The clock is ``time.perf_counter`` from the run's start plus the idle time skipped (nothing runs and the next
arrival lies ahead: ``now`` jumps to it); a request's tokens are stamped when the host knows them.

``step_first=True`` swaps steps 2 and 3: the decode step is launched first (a chunk's requests step from a
later iteration either way).  ``prefill_graphs`` (None: on a GPU unless the target is hybrid or sharded).

Each decode step leaves a ``StepRecord`` (``results.py``: what it holds).
"""

from __future__ import annotations

import time

import torch

from ...models.errors import EngineError
from ..acceptance import AcceptanceMix
from ..clock import count_host_syncs
from ..engine import SpecDecodeEngine
from ..linear_state import has_linear_state
from ..profiling import phase_range
from ..proposers import BlockProposer, proposer_for
from .block_pool import BlockPool
from .decode import bind_rows, decode_step
from .prefill import FirstToken, prefill_chunk
from .prefill_graphs import PrefillGraphs, buckets_for, unsupported
from .remap import RowStage, remap_kernel
from .requests import Request
from .results import RequestRecord, ServeRun
from .row_graphs import RowGraphs
from .rows import BatchRows, RowAcceptance, row_layout
from .sampling import SamplingParams, check_request
from .sampling import setup as sampling_setup
from .scheduler import PrefillChunk, Scheduler
from .state_slots import StateSlots
from .workload import ClosedLoop

__all__ = ["SERVING_MODES", "ServingLoop"]

I32 = torch.int32
SERVING_MODES = ("baseline", "compile", "specgen", "inductor")  # the modes whose per-step state the loop remaps
RUNTIME_MODES = ("specgen", "inductor")  # the modes whose steps run SpecVerifyRuntime's buckets


class ServingLoop:
    """Continuous batching over the engine's decode step; see the module docstring.

    ``model``: a ``Qwen3Model`` or a hybrid ``Qwen35Model`` (its linear-state slots belong to the
    requests: ``state_slots.py``); ``draft``: an MTP head or a DFlash / DSpark block draft; ``mode``:
    ``baseline``, ``compile``, ``specgen`` or ``inductor`` (``kernels``: the built folder's library, for
    ``specgen``, and for ``inductor`` its manifest; ``compile_backend``: the ``torch.compile`` backend of
    ``compile`` and ``inductor``, ``"eager"`` for an exact, uncompiled run on the CPU); ``depth``: drafts per
    step (verify width ``depth + 1``); ``max_batch``: rows of a decode step and running requests; the KV pool
    is ``num_blocks`` blocks of ``block_size`` (block 0 is the scratch block) and a sequence's table holds
    ``block_table_width`` of them; ``max_prefill_tokens``: the prefill budget per iteration.  ``acceptance``:
    an ``AcceptanceMix`` whose oracle row ``i`` is request ``i``'s greedy output.  ``complete_lag``: steps a
    completion is held back; ``read_lag``: 0 (tokens read after each step) or 1 (one step late; module
    docstring).  ``sampling``: a sampling engine, whose rows take their requests' ``SamplingParams``
    (``sampling.py``; ``draft_sampling``: the engine's).  ``step_first``: each iteration launches its decode
    step before its prefill chunks (module docstring).
    """

    def __init__(
        self,
        model,
        draft,
        *,
        mode: str,
        depth: int,
        max_batch: int,
        num_blocks: int,
        block_size: int = 16,
        block_table_width: int = 8,
        max_prefill_tokens: int = 256,
        kernels=None,
        acceptance: AcceptanceMix | None = None,
        complete_lag: int = 0,
        read_lag: int = 0,
        sampling: bool = False,
        draft_sampling: str = "sample",
        compile_backend: str = "inductor",
        step_first: bool = False,
        prefill_graphs: bool | None = None,
    ):
        proposer = proposer_for(draft)
        if mode not in SERVING_MODES:
            raise EngineError(f"the serving loop runs modes {', '.join(SERVING_MODES)}, not {mode!r}")
        if acceptance is not None and not isinstance(acceptance, AcceptanceMix):
            raise EngineError("acceptance: an AcceptanceMix bound to the requests' greedy outputs (row = request id)")
        if acceptance is not None and acceptance.oracle is None:
            raise EngineError("acceptance: bind the AcceptanceMix to the requests' greedy outputs (row = request id)")
        if read_lag not in (0, 1):
            raise EngineError(f"read_lag is 0 (tokens read after each step) or 1 (one step late), not {read_lag}")
        if max_prefill_tokens < 1 or max_batch < 1 or depth < 1:
            raise EngineError("depth, max_batch and max_prefill_tokens must be >= 1")
        self.model, self.head, self.mode = model, proposer.module, mode
        self.runtime_mode = mode in RUNTIME_MODES  # steps in SpecVerifyRuntime's buckets (decode.py)
        self.depth, self.width, self.max_batch = int(depth), int(depth) + 1, int(max_batch)
        self.num_blocks, self.block_size = int(num_blocks), int(block_size)
        self.block_table_width, self.max_prefill_tokens = int(block_table_width), int(max_prefill_tokens)
        self.acceptance, self.complete_lag, self.read_lag = acceptance, int(complete_lag), int(read_lag)
        self.late_first = self.read_lag == 1 and mode != "baseline"  # prefill tokens read a step late too
        self.step_first = bool(step_first)
        self.use_prefill_graphs, self.prefill_graphs = prefill_graphs, None  # None: on a GPU (prefill_graphs.py)
        self.engine = SpecDecodeEngine(
            model,
            proposer,
            mode=mode,
            width=self.width,
            batch=self.max_batch,
            block_size=self.block_size,
            block_table_width=self.block_table_width,
            library=kernels,
            sampling=SamplingParams() if sampling else None,
            draft_sampling=draft_sampling,
            compile_backend=compile_backend,
            draft_at_end=False,  # the loop drafts before each step, over the rows that step runs (joins included)
        )
        self.device = self.engine.device
        self.draft_name = getattr(getattr(proposer, "draft", None), "kind", "mtp")
        self.hybrid = has_linear_state(model)  # linear-state slots per request (state_slots.py)
        self.layout = row_layout(self.width, self.block_table_width, self.block_size)
        self.observer = None  # before_step(loop, out) after scheduling, after_step(loop, out) after the update
        self.requests: dict[int, Request] = {}

    # ------------------------------------------------------------------ set-up
    def _setup(self) -> None:
        e, BT = self.engine, self.block_table_width
        self.model.allocate_kv_cache(self.num_blocks, self.block_size, block_table_width=BT)
        e.proposer.allocate(self.num_blocks, self.block_size)
        e.block_table = torch.full((self.max_batch, BT), -1, dtype=I32, device=self.device)
        e.prompt_lens = torch.zeros(self.max_batch, dtype=torch.long, device=self.device)
        e.batch = self.max_batch
        e.verify_hidden = e.proposer.alloc_hidden()
        if not isinstance(e.proposer, BlockProposer):  # rows max_batch * W ..: the row stage's held slots
            e.verify_hidden = torch.cat([e.verify_hidden, torch.zeros_like(e.verify_hidden)])
        e.pool = None
        e.bufs = e.strategy.buffers()  # specgen: builds the runtime, the largest bucket's buffers
        sampling_setup(self)  # a sampling engine's logits and draft distributions, before any capture
        e.observer = None
        if self.hybrid:  # a group of W slots per running request, and those released while steps are in flight
            groups = 1 + self.max_batch * (self.complete_lag + self.read_lag + 2)
            e.state = self.state = StateSlots(self.model, groups, self.width, self.device)
        self._dev: dict[int, dict] = {}
        self._host: dict[int, dict] = {}
        self._prompt_lens: dict[int, torch.Tensor] = {}  # rows -> the draft's prompt lengths (decode.bind_rows)
        self._accept: dict[int, RowAcceptance] = {}  # rows -> the draft's AcceptanceMix rows (decode.bind_rows)
        if self.runtime_mode and self.device.type != "cpu":
            # every bucket's graph now, over padding rows (linear-state slots -1): a step that changes bucket
            # replays, never captures; the draft (the graph's prologue) reads the engine's buffers and batch
            rt = e.strategy.runtime
            for bucket in rt.buckets:
                e.bufs, e.batch = rt.buffers(bucket), bucket
                bind_rows(self, [], bucket)  # the bucket's own prompt lengths and acceptance rows, kept
                rt.capture(bucket)
            e.bufs, e.batch = rt.buffers(self.max_batch), self.max_batch
        if self.mode == "baseline":
            e.strategy.verify_graph = None
            e.strategy.h_last = e.strategy.h_seq = None
        self.row_graphs = RowGraphs(self)  # baseline, compile: every row count's verify graph, before the clock
        if not self.runtime_mode:
            self.row_graphs.capture()
        self.scratch_slot = int(e.bufs["scratch_slot"].reshape(-1)[0])
        why, want = unsupported(self), self.use_prefill_graphs
        if want and why is not None:
            raise EngineError(f"prefill graphs: {why}")
        self._graph_prefill = (self.device.type == "cuda" if want is None else want) and not why

    # -------------------------------------------------------------------- run
    @torch.inference_mode()
    def run(self, load: list[Request] | ClosedLoop, *, rate: float | None = None) -> ServeRun:
        """Serve every request of ``load`` (a list, or a ``ClosedLoop``) to the end; the run's records."""
        self._setup()
        W = self.width
        pool = BlockPool(self.num_blocks, self.block_size, scratch=SpecDecodeEngine.scratch_block)
        sched = Scheduler(pool, W, self.max_batch, self.max_prefill_tokens, auto_retire=False, read_lag=self.read_lag)
        self.scheduler, self.pool = sched, pool
        closed = load if isinstance(load, ClosedLoop) else None
        run = ServeRun(
            mode=self.mode,
            draft=self.draft_name,
            depth=self.depth,
            rate=rate,
            in_flight=closed.in_flight if closed is not None else None,
            settings={
                "max_batch": self.max_batch,
                "num_blocks": self.num_blocks,
                "block_size": self.block_size,
                "block_table_width": self.block_table_width,
                "max_prefill_tokens": self.max_prefill_tokens,
                "complete_lag": self.complete_lag,
                "read_lag": self.read_lag,
                "step_first": self.step_first,
                "prefill_graphs": list(buckets_for(self.max_prefill_tokens)) if self._graph_prefill else None,
            },
        )
        scratch = SpecDecodeEngine.scratch_block
        stage = RowStage(self.max_batch, W, self.block_table_width, self.block_size, scratch, self.device)
        kernel, why = remap_kernel(self)
        if kernel is not None and self.device.type == "cuda":  # a transition: one replay per pair of buckets
            rt, block = self.engine.strategy.runtime, isinstance(self.engine.proposer, BlockProposer)
            hidden = None if block else self.engine.verify_hidden
            stage.capture({b: rt.buffers(b) for b in rt.buckets}, hidden, kernel, self.device)
        self.rows = BatchRows(self.layout, W, self.block_size, scratch, self.scratch_slot, stage, kernel, why)
        if self._graph_prefill:  # every bucket, before the clock
            self.prefill_graphs = PrefillGraphs(self, buckets_for(self.max_prefill_tokens))
            self.prefill_graphs.capture()
        self.requests, records = {}, {}
        t0, skipped = time.perf_counter(), 0.0

        def clock() -> float:
            return time.perf_counter() - t0 + skipped

        def add(reqs) -> None:
            for r in reqs:
                cap = self.block_table_width * self.block_size
                reach = len(r.prompt) + r.max_new_tokens + W * (1 + self.read_lag)
                if reach > cap:
                    raise EngineError(f"request {r.id} may reach {reach} positions; a block table holds {cap}")
                check_request(self, r)
                sched.add(r)
                self.requests[r.id] = r
                records[r.id] = RequestRecord(r.id, arrival=r.arrival, prompt_len=len(r.prompt))

        add(closed.start() if closed is not None else sorted(load, key=lambda r: r.arrival))
        self.completed, idle, last_read = -1, 0, -1
        pending: list = []  # steps launched whose tokens the host has not read: (out, tokens, record, firsts)

        def emit(rid: int, t: float, finished: list) -> int:
            """Stamp the tokens the scheduler appended to request ``rid`` at ``t``; a finish releases its slots."""
            req, rec = self.requests[rid], records[rid]
            new = len(req.output) - rec.output_len
            rec.token_times.extend([t] * new)
            rec.output_len = len(req.output)
            if req.finished and rec.finish is None:
                rec.finish = req.finish_reason.value
                finished.append(rid)
                self.rows.drop(rid)
                self._release(rid, sched.last_step(rid))
            return new

        def read(finished: list) -> int:
            """The host reads the oldest step in flight: the scheduler takes its tokens."""
            out, tokens, record, firsts = pending.pop(0)
            if firsts:  # the step's prefill tokens read late, before its verify tokens
                sched.take_first(out, {rid: [tok.read()] for rid, tok in firsts.items()})
                t = clock()
                for rid in firsts:
                    emit(rid, t, finished)
            if callable(tokens):  # a lagged step's read-back, from its host copy
                tokens = tokens()
            done = {rid for rid in tokens if self.requests[rid].finished}  # finished before: dropped
            sched.update(out, tokens)
            t = clock()
            emitted = sum(emit(rid, t, finished) for rid in out.verify if rid not in done)
            if record is not None:
                record.tokens, record.t = emitted, t
                run.steps.append(record)
            for rid in out.preempted:
                records[rid].preemptions = self.requests[rid].preemptions
            return out.step

        while not sched.done or pending:
            now = clock()
            if not sched.running and sched.waiting and not pending:
                ahead = min(r.arrival for r in sched.waiting)
                if ahead > now:  # nothing to run until the next arrival: jump to it
                    skipped += ahead - now
                    now = clock()
            out = sched.schedule(now)
            for rid in out.preempted:
                self.rows.drop(rid)
                self._release(rid, sched.last_step(rid))
            if self.observer is not None:
                self.observer.before_step(self, out)
            produced: dict[int, list[int]] = {}
            finished: list[int] = []
            times: dict[int, float] = {}
            late: dict[int, FirstToken] = {}

            def prefill() -> None:  # the step's chunks; their requests step from the next iteration on
                with count_host_syncs(self.device.type == "cuda" and bool(out.prefill)) as syncs:
                    for chunk in out.prefill:
                        with phase_range("prefill", out.step):
                            tok = self._prefill(self.requests[chunk.id], chunk, out.tables[chunk.id])
                        if isinstance(tok, FirstToken):
                            late[chunk.id] = tok
                        elif tok is not None:
                            produced[chunk.id], times[chunk.id] = [tok], clock()
                run.prefill_chunks += len(out.prefill)
                run.prefill_host_syncs += syncs.n
                sched.take_prefill(out, produced, late=late)
                for rid in produced:
                    emit(rid, times[rid], finished)

            if not self.step_first:
                prefill()
            step = (None, None)
            if out.verify:  # the step's host part, marked for a kernel trace (bench/serve_transitions.py)
                with phase_range("serve", out.step):
                    step = decode_step(self, out, sched.unread)
            if self.step_first:
                prefill()
            pending.append((out, *step, late) if step[0] is not None else (out, {}, None, late))
            ran = bool(out.prefill or out.verify)
            lag = self.read_lag if ran else 0  # nothing launched: the host waits for every step in flight
            while len(pending) > lag:
                last_read = read(finished)
            if ran:
                idle = 0
                target = last_read - self.complete_lag
            else:  # nothing ran: every step launched so far is complete
                idle += 1
                target = out.step
                if idle > 2 and sched.running and not sched.waiting:
                    raise EngineError(f"the serving loop stalled at step {out.step}: no request can run")
            if target > self.completed:
                self.completed = target
                sched.complete(target)
                if self.hybrid:
                    self.state.retire(target)
            if self.observer is not None:
                self.observer.after_step(self, out)
            if closed is not None:
                for _ in finished:
                    add(closed.on_finish(clock()))
            took = clock() - now  # a long iteration: a compile or a capture inside the timed run, say
            if took > run.longest_iteration_s:
                run.longest_iteration_s, run.longest_iteration_step = took, out.step
        run.requests = [records[rid] for rid in sorted(records)]
        run.preemptions = sched.num_preemptions
        run.elapsed_s = clock()
        if self.runtime_mode:
            run.settings["runtime_stats"] = self.engine.strategy.stats()
        return run

    # ----------------------------------------------------------------- prefill
    def _prefill(self, req: Request, chunk: PrefillChunk, table: tuple[int, ...]) -> int | None:
        """One chunk through the target and the draft at its own positions (``prefill.py``); the last one's token."""
        return prefill_chunk(self, req, chunk, table)

    def _release(self, rid: int, step: int) -> None:
        if self.hybrid:  # step ``step`` is the last that could write the request's slots
            self.state.release(rid, step)

    def table_row(self, table: tuple[int, ...]) -> list[int]:
        """A block table padded to the table width with the scratch block (host values)."""
        return list(table) + [SpecDecodeEngine.scratch_block] * (self.block_table_width - len(table))
