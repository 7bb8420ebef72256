"""The serving loop: continuous batching of requests over the engine's speculative decode step.

``ServingLoop`` puts the plain-data scheduler (``scheduler.py``) beside the decode
machinery of ``SpecDecodeEngine``: the same target, MTP proposer, boundary mode and
step buffers, driven one iteration at a time over whichever requests are running::

    loop = ServingLoop(model, head, mode="specgen", depth=3, max_batch=8, num_blocks=24,
                       block_size=16, block_table_width=8, max_prefill_tokens=64, kernels=lib)
    run = loop.run(Workload(num_requests=100, rate=20.0).requests())   # or a ClosedLoop
    run.metrics()["output_tokens_per_s"], loop.requests[0].output

Each iteration:

1. ``Scheduler.schedule(now)``: running requests first (the next prefill chunk or a
   verify step), preemption of the newest when blocks run out, then admissions of
   requests that arrived (``now >= arrival``);
2. every prefill chunk runs through the target (one forward per chunk, at the
   chunk's positions over the request's own blocks) and the MTP head; the last chunk
   gives the request's next token and the state its first decode step starts from
   (the last prefix token and its hidden state, the bonus token, the length);
3. one speculative decode step (draft, verify, acceptance through the chosen mode)
   over exactly the running requests past their prefill.  Its per-row state (the
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
could write them completed.

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
from dataclasses import dataclass

import torch

from ...models.errors import EngineError
from ...runtime.buffers import alloc_step_buffers, bucket_of
from ...runtime.semantics import slot
from ..acceptance import AcceptanceMix
from ..clock import count_host_syncs
from ..engine import SpecDecodeEngine
from ..linear_state import has_linear_state
from ..proposers import MTPProposer, proposer_for
from .block_pool import BlockPool
from .requests import Request
from .results import RequestRecord, ServeRun, StepRecord
from .scheduler import PrefillChunk, Scheduler, SchedulerOutput
from .workload import ClosedLoop

__all__ = ["SERVING_MODES", "ServingLoop", "remap_rows", "row_layout"]

I32 = torch.int32
SERVING_MODES = ("baseline", "specgen")  # the modes whose per-step state the loop remaps


def row_layout(width: int, block_table_width: int, block_size: int) -> dict[str, int]:
    """Step buffers that hold per-row state, with their entries per row: 1 (``[B, ...]``) or ``W`` (``[B * W]``).

    Derived from the buffers of one and two rows; ``query_start_loc`` (``[B + 1]``) and the
    scalars are recomputed by every step and carry no row state.
    """
    one = alloc_step_buffers(1, width, block_table_width, block_size=block_size)
    two = alloc_step_buffers(2, width, block_table_width, block_size=block_size)
    out = {}
    for name, t in one.items():
        k = two[name].shape[0] - t.shape[0]
        if k > 0 and t.shape[0] == k:
            out[name] = k
    return out


def _rows(t: torch.Tensor, k: int) -> torch.Tensor:
    return t.view(t.shape[0] // k, k, *t.shape[1:])


def remap_rows(
    dst: dict[str, torch.Tensor],
    src: dict[str, torch.Tensor],
    layout: dict[str, int],
    src_rows: list[int],
    width: int,
) -> None:
    """Row ``i`` of every per-row buffer of ``dst`` becomes row ``src_rows[i]`` of ``src`` (a gather, then an
    ``index_copy``); rows with ``src_rows[i] < 0`` are left for the caller to write (joining rows).

    ``layout`` names the buffers and their entries per row (``row_layout``; a hidden-state
    tensor of ``W`` rows per sequence is one more entry).  ``dst`` and ``src`` may be the same
    buffers: each field is gathered before it is written.  ``hidden_rows`` holds indices of
    verify rows (``row * W + j``), so its values move with the row.  On the CPU this is one
    ``index_select`` and one copy per field; on a device it is what a captured kernel would do.
    """
    pairs = [(i, r) for i, r in enumerate(src_rows) if r >= 0]
    if not pairs:
        return
    dev = next(iter(src.values())).device
    to = torch.tensor([i for i, _ in pairs], dtype=torch.long, device=dev)
    frm = torch.tensor([r for _, r in pairs], dtype=torch.long, device=dev)
    for name, k in layout.items():
        if name not in src or name not in dst:
            continue
        moved = _rows(src[name], k).index_select(0, frm)
        if name == "hidden_rows":
            shift = ((to - frm) * width).to(moved.dtype)
            moved = moved + shift.view(-1, *([1] * (moved.dim() - 1)))
        _rows(dst[name], k).index_copy_(0, to, moved)


def _take_row(bufs: dict[str, torch.Tensor], layout: dict[str, int], row: int) -> dict[str, torch.Tensor]:
    return {n: _rows(bufs[n], k)[row].clone() for n, k in layout.items() if n in bufs}


def _put_row(bufs, layout, row: int, state: dict, from_row: int, width: int) -> None:
    for n, k in layout.items():
        if n not in state or n not in bufs:
            continue
        v = state[n]
        if n == "hidden_rows":
            v = v + (row - from_row) * width
        _rows(bufs[n], k)[row].copy_(v)


@dataclass
class _Joined:
    """What a request's first decode step starts from, left by the last chunk of its prefill."""

    last_token: int  # the prefix's last token (position P - 1)
    bonus: int  # the prefill's token (position P)
    hidden: torch.Tensor  # the target's hidden state at P - 1, as the head reads it
    length: int  # P


@dataclass
class _Parked:
    """The row state of a running request that sat a step out (its blocks were still in flight)."""

    row: int
    dev: dict
    host: dict | None
    hidden: torch.Tensor


class _RowAcceptance:
    """An ``AcceptanceMix`` bound per request id, looked up for the rows of one step."""

    def __init__(self, mix: AcceptanceMix, ids: list[int]):
        idx = torch.tensor(ids, dtype=torch.long, device=mix.oracle.device)
        self.p, self.seed = mix.p, mix.seed
        self.oracle, self.hit, self.other = mix.oracle[idx], mix.hit[idx], mix.other[idx]

    _pick = AcceptanceMix._pick
    apply = AcceptanceMix.apply


class ServingLoop:
    """Continuous batching over the engine's decode step; see the module docstring.

    ``model``: a ``Qwen3Model`` (a hybrid target is refused); ``draft``: an MTP head (block
    drafts are refused); ``mode``: ``baseline`` or ``specgen`` (``kernels``: the built
    folder's library, for ``specgen``); ``depth``: drafts per step (verify width
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
        if has_linear_state(model):
            raise EngineError(
                "the serving loop runs dense targets only: a hybrid target's linear-state slots are not remapped yet"
            )
        proposer = proposer_for(draft)
        if not isinstance(proposer, MTPProposer):
            raise EngineError(
                f"the serving loop runs the MTP draft only, not a {type(proposer.module).__name__} "
                "(a block draft's context KV prefill is not chunked yet)"
            )
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
            draft="mtp",
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
        self._rows: list[int] = []  # request ids of the previous decode step's rows
        self._row_bufs: tuple | None = None
        self._joined: dict[int, _Joined] = {}
        self._parked: dict[int, _Parked] = {}
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
                self._joined.pop(rid, None)
                self._parked.pop(rid, None)
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
                    self._joined.pop(rid, None)
                    self._parked.pop(rid, None)
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
        """One chunk through the target and the MTP head at its own positions; the last one's token."""
        e, BS, dev = self.engine, self.block_size, self.device
        s, n = chunk.start, len(chunk.tokens)
        bt = self._table_row(table)[None]
        pos = torch.arange(s, s + n, device=dev)
        toks = torch.tensor(chunk.tokens, device=dev)
        qsl = torch.tensor([0, n], device=dev)
        kv = torch.tensor([s + n], device=dev)
        hidden, logits = e.call_target(toks, pos, slot(bt, pos[None], BS).reshape(-1), bt, kv, qsl, n)
        hidden = self.head.from_target(hidden)
        P, prefix = req.prefill_len, req.prefix
        m = min(s + n, P - 1) - s  # head rows: token q with the target's hidden state of q - 1, for q <= P - 1
        if m > 0:
            q = torch.arange(s + 1, s + 1 + m, device=dev)
            dt = torch.tensor(prefix[s + 1 : s + 1 + m], device=dev)
            kv = torch.tensor([s + 1 + m], device=dev)
            self.head(dt, q, slot(bt, q[None], BS).reshape(-1), hidden[:m], bt, kv, torch.tensor([0, m], device=dev), m)
        if not chunk.last:
            return None
        bonus = int(self.model.greedy_tokens(logits[n - 1 : n])[0])
        self._joined[req.id] = _Joined(prefix[P - 1], bonus, hidden[n - 1].clone(), P)
        return bonus

    def _table_row(self, table: tuple[int, ...]) -> torch.Tensor:
        row = list(table) + [SpecDecodeEngine.scratch_block] * (self.block_table_width - len(table))
        return torch.tensor(row, dtype=I32, device=self.device)

    # ------------------------------------------------------------------ decode
    def _place_rows(self, ids: list[int], tables: dict) -> tuple[dict, dict | None, int, int, int]:
        """Move every row's state to this step's order (``remap_rows``), write joining rows, set the tables."""
        e, W = self.engine, self.width
        n = len(ids)
        dst, hdst, launched = self._bufs(n)
        hlayout = {**self.layout, "h_last": 1, "h_seq": 1}
        prev = {rid: i for i, rid in enumerate(self._rows)}
        if self._row_bufs is not None:  # park the running requests that sit this step out (blocks in flight)
            src, hsrc = self._row_bufs
            running = {r.id for r in self.scheduler.running if not r.in_prefill}
            for rid, i in prev.items():
                if rid not in ids and rid in running and rid not in self._joined:
                    hid = e.verify_hidden[i * W : (i + 1) * W].clone()
                    host = _take_row(hsrc, hlayout, i) if hsrc is not None else None
                    self._parked[rid] = _Parked(i, _take_row(src, self.layout, i), host, hid)
        fresh = lambda rid: rid in self._joined or rid in self._parked  # noqa: E731
        src_rows = [prev[rid] if rid in prev and not fresh(rid) else -1 for rid in ids]
        remaps = 0
        if any(r >= 0 for r in src_rows):
            src, hsrc = self._row_bufs
            if src is not dst or any(r >= 0 and r != i for i, r in enumerate(src_rows)):
                hidden = {"verify_hidden": e.verify_hidden}
                remap_rows(dst, src, self.layout, src_rows, W)
                remap_rows(hidden, hidden, {"verify_hidden": W}, src_rows, W)
                if hdst is not None:
                    remap_rows(hdst, hsrc, hlayout, src_rows, W)
                remaps = 1
        joined = []
        for i, rid in enumerate(ids):
            if src_rows[i] >= 0:
                continue
            if rid in self._joined:
                joined.append((i, self._joined.pop(rid)))
            elif rid in self._parked:
                p = self._parked.pop(rid)
                _put_row(dst, self.layout, i, p.dev, p.row, W)
                e.verify_hidden[i * W : (i + 1) * W].copy_(p.hidden)
                if hdst is not None:
                    _put_row(hdst, hlayout, i, p.host, p.row, W)
            else:
                raise AssertionError(f"request {rid} decodes without a prefill or a row")
        table = torch.stack([self._table_row(tables[rid]) for rid in ids])
        dst["block_table"][:n].copy_(table)
        if hdst is not None:
            hdst["block_table"].copy_(table.cpu())
        for i, j in joined:
            self._join(dst, hdst, i, j)
        # what the draft's carry writes; the runtime checks the table against it before the step
        dst["seq_lens"][:n].copy_(dst["next_seq_lens"][:n])
        dst["last_tokens"][:n].copy_(dst["next_last_token"][:n])
        if launched > n:
            self._pad(dst, n)
        return dst, hdst, launched, remaps, sum(r < 0 for r in src_rows)

    def _join(self, bufs: dict, host: dict | None, i: int, j: _Joined) -> None:
        """Row ``i`` starts from its prefill: the draft's repair row is the last prefix token at ``P - 1`` (its KV
        is written: the scratch slot), the new row the bonus token at ``P`` with the hidden state of ``P - 1``."""
        e, W = self.engine, self.width
        base = i * W
        bufs["tokens"][base] = j.last_token
        bufs["accepted"][i] = 0
        bufs["next_last_token"][i] = j.bonus
        bufs["next_seq_lens"][i] = j.length
        bufs["draft_positions"][i, 0], bufs["draft_positions"][i, 1] = j.length - 1, j.length
        pos = torch.tensor([[j.length]], device=self.device)
        bufs["draft_slots"][i, 0] = self.scratch_slot
        bufs["draft_slots"][i, 1] = slot(bufs["block_table"][i : i + 1], pos, self.block_size)[0, 0]
        bufs["hidden_rows"][i] = base
        e.verify_hidden[base].copy_(j.hidden)
        if host is not None:
            host["accepted"][i] = 0
            host["h_last"][i] = j.bonus
            host["h_seq"][i] = j.length

    def _pad(self, bufs: dict, n: int) -> None:
        """Rows ``n:`` of a bucket: length 0 on the scratch block, drafting and verifying nothing real."""
        W = self.width
        bufs["block_table"][n:].fill_(SpecDecodeEngine.scratch_block)
        zero = ("next_seq_lens", "next_last_token", "accepted", "seq_lens", "last_tokens", "draft_positions")
        for name in (*zero, "draft_tokens"):
            bufs[name][n:].fill_(0)
        bufs["tokens"][n * W :].fill_(0)
        bufs["draft_slots"][n:].fill_(self.scratch_slot)
        rows = bufs["hidden_rows"].shape[0]
        bufs["hidden_rows"][n:].copy_((torch.arange(n, rows, device=self.device, dtype=I32) * W)[:, None].expand(-1, 2))

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
            e.acceptance = _RowAcceptance(self.acceptance, ids + [0] * (launched - n))
        lengths = [self.requests[r].length - 1 for r in ids]  # KV already written: all but the newest token
        lo, hi = min(lengths), max(lengths)
        with count_host_syncs(self.device.type == "cuda") as syncs:
            if self.mode == "specgen":
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
        self._rows, self._row_bufs = ids, (bufs, host)
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
