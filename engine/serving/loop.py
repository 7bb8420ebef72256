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
2. every prefill chunk runs through the target (one forward per chunk, at the
   chunk's positions over the request's own blocks) and the draft (``prefill.py``: the
   MTP head's rows, or a block draft's context K/V); the last chunk gives the request's
   next token and the state its first decode step starts from (the last prefix token
   and its hidden state, the bonus token, the length);
3. one speculative decode step (draft, verify, acceptance through the chosen mode)
   over exactly the running requests past their prefill (a block draft's own forward
   first, in ``specgen`` too: it is not the runtime's prologue).  Its per-row state (the
   step buffers the draft and the head read, the verify rows' hidden states, the
   baseline's host copies) is first moved to the step's row order by ``remap_rows``:
   rows that stay are gathered, rows that join are written from their prefill (or,
   for one that sat a step out, from its parked row);
4. ``Scheduler.update`` with the committed tokens, cut at a stop token or the budget
   (``Request.append``), then ``Scheduler.complete`` for the steps known finished:
   the blocks of a finished or preempted request go back to the pool only then
   (``BlockPool.retire``).  On the CPU a step is finished when its tokens are read;
   ``complete_lag`` holds completion back that many more steps (what a device with
   steps in flight does), so the lagged release is exercised.

A preempted request's prefix (prompt and output so far) is prefilled again when it
is readmitted; its blocks may be handed to another request only once every step that
could write them completed.  A hybrid target's linear-state slots are the request's
too (``StateSlots``: ``W`` per request, written into its row's ``state_slots`` each
step, released like its blocks; a prefill starts from the zero state).

The clock is ``time.perf_counter`` relative to the run's start, plus the time skipped:
when nothing runs and the next arrival lies ahead, ``now`` jumps to it without
sleeping (simulated idle time).  Arrivals are on the same clock.  A request's output
tokens are stamped when the host knows them (every token one step commits shares the
time); a prefill's token when its last chunk's forward returns.

What each ``StepRecord`` holds: ``batch`` (rows of the step, padding rows of a
bucket not counted), ``fast_path`` and ``reason`` (the runtime's ``StepResult`` in
``specgen``; ``True`` / ``None`` in ``baseline``, which has no fallback),
``host_syncs`` (synchronizations reported by ``torch.cuda``'s sync debug mode over
the step's launch on a CUDA device, the read-back excluded as in the engine; 0 on
the CPU, where nothing is measured), ``tokens`` (emitted after the cut at a stop
token or the budget), ``proposed`` / ``accepted`` (drafts of the step's rows),
``bucket`` (the runtime's batch bucket; ``specgen`` only), ``remaps`` (calls of
``remap_rows`` before the step: 0 when every row kept its index) and ``joined``
(rows written from a prefill or a parked row).
"""

from __future__ import annotations

import time

import torch

from ...models.errors import EngineError
from ...runtime.buffers import alloc_step_buffers, bucket_of
from ..acceptance import AcceptanceMix
from ..clock import count_host_syncs
from ..engine import SpecDecodeEngine
from ..linear_state import has_linear_state
from ..proposers import proposer_for
from .block_pool import BlockPool
from .prefill import prefill_chunk
from .requests import Request
from .results import RequestRecord, ServeRun, StepRecord
from .rows import BatchRows, RowAcceptance, row_layout
from .scheduler import PrefillChunk, Scheduler, SchedulerOutput
from .state_slots import StateSlots
from .workload import ClosedLoop

__all__ = ["SERVING_MODES", "ServingLoop"]

I32 = torch.int32
SERVING_MODES = ("baseline", "specgen")  # the modes whose per-step state the loop remaps


class ServingLoop:
    """Continuous batching over the engine's decode step; see the module docstring.

    ``model``: a ``Qwen3Model`` or a hybrid ``Qwen35Model`` (its linear-state slots belong to the
    requests: ``state_slots.py``); ``draft``: an MTP head or a DFlash / DSpark block draft; ``mode``:
    ``baseline`` or ``specgen`` (``kernels``: the built folder's library, for ``specgen``);
    ``depth``: drafts per step (verify width
    ``depth + 1``); ``max_batch``: rows of a decode step and running requests; the KV pool
    is ``num_blocks`` blocks of ``block_size`` (block 0 is the scratch block) and a
    sequence's table holds ``block_table_width`` of them; ``max_prefill_tokens``: the
    prefill budget per iteration.  ``acceptance``: an ``AcceptanceMix`` whose oracle row
    ``i`` is request ``i``'s greedy output.
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
    ):
        proposer = proposer_for(draft)
        if mode not in SERVING_MODES:
            raise EngineError(f"the serving loop runs modes {', '.join(SERVING_MODES)}, not {mode!r}")
        if acceptance is not None and not isinstance(acceptance, AcceptanceMix):
            raise EngineError("acceptance: an AcceptanceMix bound to the requests' greedy outputs (row = request id)")
        if acceptance is not None and acceptance.oracle is None:
            raise EngineError("acceptance: bind the AcceptanceMix to the requests' greedy outputs (row = request id)")
        if max_prefill_tokens < 1 or max_batch < 1 or depth < 1:
            raise EngineError("depth, max_batch and max_prefill_tokens must be >= 1")
        self.model, self.head, self.mode = model, proposer.module, mode
        self.depth, self.width, self.max_batch = int(depth), int(depth) + 1, int(max_batch)
        self.num_blocks, self.block_size = int(num_blocks), int(block_size)
        self.block_table_width, self.max_prefill_tokens = int(block_table_width), int(max_prefill_tokens)
        self.acceptance, self.complete_lag = acceptance, int(complete_lag)
        self.engine = SpecDecodeEngine(
            model,
            proposer,
            mode=mode,
            width=self.width,
            batch=self.max_batch,
            block_size=self.block_size,
            block_table_width=self.block_table_width,
            library=kernels,
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
        e.pool = None
        e.bufs = e.strategy.buffers()  # specgen: builds the runtime, the largest bucket's buffers
        e.observer = None
        if self.hybrid:  # a group of W slots per running request, and those released while steps are in flight
            groups = 1 + self.max_batch * (self.complete_lag + 2)
            e.state = self.state = StateSlots(self.model, groups, self.width, self.device)
        self._dev: dict[int, dict] = {}
        self._host: dict[int, dict] = {}
        if self.mode == "baseline":
            e.strategy.verify_graph = e.graph(e.forward_only)
            e.strategy.h_last = e.strategy.h_seq = None
        self.scratch_slot = int(e.bufs["scratch_slot"].reshape(-1)[0])

    def _bufs(self, n: int) -> tuple[dict, dict | None, int]:
        """The device buffers a step of ``n`` rows runs in, the baseline's host copies, and the rows launched."""
        if self.mode == "specgen":
            rt = self.engine.strategy.runtime
            return rt.buffers(n), None, bucket_of(rt.buckets, n)
        if n not in self._dev:
            kw = dict(block_size=self.block_size, scratch_block=SpecDecodeEngine.scratch_block)
            self._dev[n] = alloc_step_buffers(n, self.width, self.block_table_width, device=self.device, **kw)
            host = alloc_step_buffers(n, self.width, self.block_table_width, **kw)
            host["h_last"], host["h_seq"] = torch.zeros(n, dtype=I32), torch.zeros(n, dtype=I32)
            self._host[n] = host
        return self._dev[n], self._host[n], n

    # -------------------------------------------------------------------- run
    @torch.inference_mode()
    def run(self, load: list[Request] | ClosedLoop, *, rate: float | None = None) -> ServeRun:
        """Serve every request of ``load`` (a list, or a ``ClosedLoop``) to the end; the run's records."""
        self._setup()
        W = self.width
        pool = BlockPool(self.num_blocks, self.block_size, scratch=SpecDecodeEngine.scratch_block)
        sched = Scheduler(pool, W, self.max_batch, self.max_prefill_tokens, auto_retire=False)
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
            },
        )
        self.requests, records = {}, {}
        t0, skipped = time.perf_counter(), 0.0

        def clock() -> float:
            return time.perf_counter() - t0 + skipped

        def add(reqs) -> None:
            for r in reqs:
                cap = self.block_table_width * self.block_size
                if len(r.prompt) + r.max_new_tokens + W > cap:
                    raise EngineError(
                        f"request {r.id} may reach {len(r.prompt) + r.max_new_tokens + W} positions; "
                        f"a block table holds {cap}"
                    )
                sched.add(r)
                self.requests[r.id] = r
                records[r.id] = RequestRecord(r.id, arrival=r.arrival, prompt_len=len(r.prompt))

        add(closed.start() if closed is not None else sorted(load, key=lambda r: r.arrival))
        scratch = SpecDecodeEngine.scratch_block
        self.rows = BatchRows(self.layout, W, self.block_size, scratch, self.scratch_slot)
        completed, idle = -1, 0
        while not sched.done:
            now = clock()
            if not sched.running and sched.waiting:
                ahead = min(r.arrival for r in sched.waiting)
                if ahead > now:  # nothing to run until the next arrival: jump to it
                    skipped += ahead - now
                    now = clock()
            out = sched.schedule(now)
            for rid in out.preempted:
                self.rows.drop(rid)
                self._release(rid, out.step)
            if self.observer is not None:
                self.observer.before_step(self, out)
            produced: dict[int, list[int]] = {}
            times: dict[int, float] = {}
            for chunk in out.prefill:
                tok = self._prefill(self.requests[chunk.id], chunk, out.tables[chunk.id])
                if chunk.last:
                    produced[chunk.id], times[chunk.id] = [tok], clock()
            step = self._decode(out, now) if out.verify else None
            if step is not None:
                step_tokens, record = step
                t = clock()
                for rid, toks in step_tokens.items():
                    produced[rid], times[rid] = toks, t
            before = {rid: len(self.requests[rid].output) for rid in produced}
            sched.update(out, produced)
            finished = []
            for rid, n0 in before.items():
                req, rec = self.requests[rid], records[rid]
                new = len(req.output) - n0
                rec.token_times.extend([times[rid]] * new)
                rec.output_len = len(req.output)
                if req.finished:
                    rec.finish = req.finish_reason.value
                    finished.append(rid)
                    self.rows.drop(rid)
                    self._release(rid, out.step)
            if step is not None:
                record.tokens = sum(len(self.requests[rid].output) - before[rid] for rid in out.verify)
                record.t = t
                run.steps.append(record)
            for rid in out.preempted:
                records[rid].preemptions = self.requests[rid].preemptions
            if out.prefill or out.verify:
                idle = 0
                target = out.step - self.complete_lag
            else:  # nothing ran: every step launched so far is complete
                idle += 1
                target = out.step
                if idle > 2 and sched.running and not sched.waiting:
                    raise EngineError(f"the serving loop stalled at step {out.step}: no request can run")
            if target > completed:
                completed = target
                sched.complete(completed)
                if self.hybrid:
                    self.state.retire(completed)
            self.completed = completed
            if self.observer is not None:
                self.observer.after_step(self, out)
            if closed is not None:
                for _ in finished:
                    add(closed.on_finish(clock()))
        run.requests = [records[rid] for rid in sorted(records)]
        run.preemptions = sched.num_preemptions
        run.elapsed_s = clock()
        if self.mode == "specgen":
            run.settings["runtime_stats"] = self.engine.strategy.stats()
        return run

    # ----------------------------------------------------------------- prefill
    def _prefill(self, req: Request, chunk: PrefillChunk, table: tuple[int, ...]) -> int | None:
        """One chunk through the target and the draft at its own positions (``prefill.py``); the last one's token."""
        return prefill_chunk(self, req, chunk, self._table_row(table)[None])

    def _release(self, rid: int, step: int) -> None:
        if self.hybrid:  # step ``step`` is the last that could write the request's slots
            self.state.release(rid, step)

    def _table_row(self, table: tuple[int, ...]) -> torch.Tensor:
        row = list(table) + [SpecDecodeEngine.scratch_block] * (self.block_table_width - len(table))
        return torch.tensor(row, dtype=I32, device=self.device)

    # ------------------------------------------------------------------ decode
    def _place_rows(self, ids: list[int], tables: dict) -> tuple[dict, dict | None, int, int, int]:
        """This step's buffers, with every row's state in the step's order (``BatchRows.place``)."""
        dst, hdst, launched = self._bufs(len(ids))
        table = torch.stack([self._table_row(tables[rid]) for rid in ids])
        running = {r.id for r in self.scheduler.running if not r.in_prefill}
        remaps, joined = self.rows.place(ids, table, dst, hdst, launched, self.engine.verify_hidden, running)
        if self.hybrid:  # the requests' own slots, whichever row they hold; padding rows write no state
            slots = self.state.row_slots(ids, launched)
            dst["state_slots"][:launched].copy_(slots)
            if hdst is not None:
                hdst["state_slots"][:launched].copy_(slots)
        return dst, hdst, launched, remaps, joined

    def _decode(self, out: SchedulerOutput, now: float) -> tuple[dict[int, list[int]], StepRecord]:
        """One speculative step over ``out.verify``: draft, verify, acceptance; the tokens per request."""
        e, W = self.engine, self.width
        ids = list(out.verify)
        n = len(ids)
        bufs, host, launched, remaps, joined = self._place_rows(ids, out.tables)
        e.bufs, e.batch = bufs, launched
        e.prompt_lens = torch.tensor(
            [len(self.requests[r].prompt) for r in ids] + [0] * (launched - n), dtype=torch.long, device=self.device
        )
        if self.acceptance is not None:
            e.acceptance = RowAcceptance(self.acceptance, ids + [0] * (launched - n))
        lengths = [self.requests[r].length - 1 for r in ids]  # KV already written: all but the newest token
        lo, hi = min(lengths), max(lengths)
        with count_host_syncs(self.device.type == "cuda") as syncs:
            if self.mode == "specgen":
                if not e.strategy.fuses_draft:  # a block draft keeps its own graph, before the step
                    e._draft()
                res = e.strategy.runtime.step_in_place(n, (lo, hi))
                accepted, next_tokens = res.accepted[:n].tolist(), res.next_tokens[:n].tolist()
                fast, reason, bucket = bool(res.fast_path), res.reason, launched
            else:
                s = e.strategy
                s.h_bufs = {k: v for k, v in host.items() if not k.startswith("h_")}
                s.h_last, s.h_seq = host["h_last"].clone(), host["h_seq"].clone()
                e._draft()
                acc, nxt = s.verify(lo, hi, mark=lambda: None)
                host["h_last"].copy_(s.h_last)
                host["h_seq"].copy_(s.h_seq)
                accepted, next_tokens = acc[:n].tolist(), nxt[:n].tolist()
                fast, reason, bucket = True, None, None
        tokens = {rid: next_tokens[i][: accepted[i] + 1] for i, rid in enumerate(ids)}
        record = StepRecord(
            t=0.0,
            batch=n,
            fast_path=fast,
            host_syncs=syncs.n,
            proposed=n * (W - 1),
            accepted=sum(accepted),
            reason=reason,
            bucket=bucket,
            remaps=remaps,
            joined=joined,
        )
        return tokens, record
