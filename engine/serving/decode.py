"""One decode step of the serving loop over the running requests: rows placed, the step launched, its tokens.

``decode_step`` runs the engine's speculative step (draft, verify, acceptance through the
loop's mode) over the requests a ``SchedulerOutput`` verifies, in the step buffers of that
many rows (``specgen``, ``inductor``: the runtime's bucket; ``compile``: its verify graph of a bucket of
the same sizes, ``RowGraphs.verify``; ``baseline``: exactly that many rows), after ``BatchRows.place``
moved every row's state to the step's order.  The host's bounds of the rows' lengths allow for a step whose
tokens it has not read yet (``unread``: up to ``W`` tokens more per such request) and for a prefill's
token not read yet (``Scheduler.unread_first``: one more).
"""

from __future__ import annotations

import functools
from typing import Callable

import torch

from ...models.errors import EngineError
from ...runtime.buffers import alloc_step_buffers, bucket_of, buckets_for
from ..clock import count_host_syncs
from ..engine import SpecDecodeEngine
from ..proposers import BlockProposer
from .results import StepRecord
from .rows import RowAcceptance, upload
from .sampling import forward_body
from .sampling import write_rows as write_sampling
from .scheduler import SchedulerOutput

__all__ = ["decode_step", "step_bufs"]

I32 = torch.int32


def step_bufs(loop, n: int) -> tuple[dict, dict | None, int]:
    """The device buffers a step of ``n`` rows runs in, the baseline's host copies, and the rows launched:
    ``specgen`` and ``inductor`` the runtime's bucket, ``compile`` a bucket of the same sizes (its own buffers:
    it pays the same padding for as few compiled shapes), ``baseline`` exactly ``n``."""
    if loop.runtime_mode:
        rt = loop.engine.strategy.runtime
        return rt.buffers(n), None, bucket_of(rt.buckets, n)
    if loop.mode == "compile":
        n = bucket_of(buckets_for(loop.max_batch), n)
    if n not in loop._dev:
        kw = dict(block_size=loop.block_size, scratch_block=SpecDecodeEngine.scratch_block)
        loop._dev[n] = alloc_step_buffers(n, loop.width, loop.block_table_width, device=loop.device, **kw)
        if loop.mode == "baseline":  # compile keeps its state on the device, as specgen
            host = alloc_step_buffers(n, loop.width, loop.block_table_width, **kw)
            host["h_last"], host["h_seq"] = torch.zeros(n, dtype=I32), torch.zeros(n, dtype=I32)
            loop._host[n] = host
    return loop._dev[n], loop._host.get(n), n


def place_rows(loop, ids: list[int], tables: dict, bounds: tuple[int, int]):
    """This step's buffers, with every row's state in the step's order (``BatchRows.place``): the buffers,
    the host copies, the rows launched, the remaps, the rows joined and why the remap ran in torch."""
    dst, hdst, launched = step_bufs(loop, len(ids))
    table = torch.tensor([loop.table_row(tables[rid]) for rid in ids], dtype=I32)
    running = {r.id for r in loop.scheduler.running if not r.in_prefill}
    hidden = None if isinstance(loop.engine.proposer, BlockProposer) else loop.engine.verify_hidden
    placed = loop.rows.place(ids, table, dst, hdst, launched, hidden, running, bounds)
    write_sampling(loop, ids, dst, launched)  # the rows' requests' sampling parameters (a sampling loop)
    if loop.hybrid:  # the requests' own slots, whichever row they hold; padding rows write no state
        slots = loop.state.row_slots(ids, launched)
        dst["state_slots"][:launched].copy_(upload(slots, loop.device))
        if hdst is not None:
            hdst["state_slots"][:launched].copy_(slots)
    return dst, hdst, launched, *placed


def bind_rows(loop, ids: list[int], rows: int) -> None:
    """What the draft reads besides the step buffers for requests ``ids`` in ``rows`` rows (the rest
    padding): the prompt lengths and the ``AcceptanceMix`` rows, written in place into tensors kept per row
    count (on ``loop``), since a captured draft keeps reading the ones it was captured with."""
    e = loop.engine
    lens = loop._prompt_lens.get(rows)
    if lens is None:
        lens = loop._prompt_lens[rows] = torch.zeros(rows, dtype=torch.long, device=loop.device)
    prompts = [len(loop.requests[r].prompt) for r in ids] + [0] * (rows - len(ids))
    lens.copy_(upload(torch.tensor(prompts, dtype=torch.long), loop.device))
    e.prompt_lens = lens
    if loop.acceptance is not None:
        padded = ids + [0] * (rows - len(ids))
        mix = loop._accept.get(rows)
        if mix is None:
            mix = loop._accept[rows] = RowAcceptance(loop.acceptance, padded)
        else:
            mix.fill(padded)
        e.acceptance = mix


def decode_step(loop, out: SchedulerOutput, unread: set) -> tuple[dict[int, list[int]] | Callable, StepRecord]:
    """One speculative step over ``out.verify``: draft, verify, acceptance; the tokens per request, or (specgen
    on a device with ``read_lag=1``) a function that reads them from the step's pinned host copy once the
    next step is launched: the host never waits for the step it just launched."""
    e, W = loop.engine, loop.width
    ids = list(out.verify)
    n = len(ids)
    # KV already written: all but the newest token; a step not read yet added 1..W more, a prefill's token
    # not read yet (late_first) exactly 1
    first = loop.scheduler.unread_first
    known = [loop.requests[r].length - 1 + (r in first) for r in ids]
    lo = min(k + (r in unread) for k, r in zip(known, ids))
    hi = max(k + W * (r in unread) for k, r in zip(known, ids))
    # the host's part of the step, the row remap included, is counted: it must not synchronize either
    with count_host_syncs(loop.device.type == "cuda") as syncs:
        bufs, host, launched, remaps, joined, remap_reason = place_rows(loop, ids, out.tables, (lo, hi))
        e.bufs, e.batch = bufs, launched
        bind_rows(loop, ids, launched)
        if loop.device.type == "cpu":  # reading the rows' lengths costs nothing here: the bounds must hold them
            seq = bufs["seq_lens"][:n]
            if not lo <= int(seq.min()) <= int(seq.max()) <= hi:
                raise EngineError(f"the host's length bounds {(lo, hi)} miss the rows' {seq.tolist()}")
        if loop.runtime_mode:
            if not e.strategy.fuses_draft:  # a block draft keeps its own graph, before the step
                e._draft()
            rt = e.strategy.runtime
            res = rt.step_in_place(n, (lo, hi))
            if loop.read_lag and loop.device.type == "cuda":  # read from the step's pinned host copy, later
                commit = functools.partial(_host_copy, rt, rt.result_ticket(), n)
            else:
                commit = res.accepted[:n], res.next_tokens[:n]  # read back below, outside the count
            fast, reason, bucket = bool(res.fast_path), res.reason, launched
        elif loop.mode == "compile":  # the draft, then the row count's verify graph; read back below
            e._draft()
            commit = loop.row_graphs.verify(launched, n)
            fast, reason, bucket = True, None, launched
        else:
            s = e.strategy
            s.h_bufs = {k: v for k, v in host.items() if not k.startswith("h_")}
            s.h_last, s.h_seq = host["h_last"].clone(), host["h_seq"].clone()
            body = forward_body(loop, launched)  # a sampling engine: strategy.weights and .totals are this row count's
            # on a GPU the graph over these buffers, captured at set-up (row_graphs.py); eager on the CPU
            cuda = loop.device.type == "cuda"
            s.verify_graph = functools.partial(loop.row_graphs.forward, launched) if cuda else body
            e._draft()
            acc, nxt = s.verify(lo, hi, mark=lambda: None)
            host["h_last"].copy_(s.h_last)
            host["h_seq"].copy_(s.h_seq)
            commit = acc[:n], nxt[:n]
            fast, reason, bucket = True, None, None
    record = StepRecord(
        t=0.0,
        batch=n,
        fast_path=fast,
        host_syncs=syncs.n,
        proposed=n * (W - 1),
        accepted=0,
        reason=reason,
        bucket=bucket,
        remaps=remaps,
        joined=joined,
        remap_path=None if not (remaps or joined) else ("torch" if remap_reason else "kernel"),
        remap_reason=remap_reason,
        step=out.step,
    )
    reader = functools.partial(_read_back, ids, commit, record)
    return (reader if callable(commit) else reader()), record


def _host_copy(rt, ticket: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A lagged step's accepted counts and tokens from its pinned host copy (waits on its copy event only)."""
    host = rt.host_result_of(ticket)
    return host.accepted[:n], host.next_tokens[:n]


def _read_back(ids: list[int], commit, record: StepRecord) -> dict[int, list[int]]:
    """The read-back: each request's committed tokens (its accepted drafts and the bonus); the record's
    accepted count.  ``commit``: the step's (accepted, next_tokens), or a function giving them later."""
    acc, nxt = commit() if callable(commit) else commit
    accepted, next_tokens = acc.tolist(), nxt.tolist()
    record.accepted = sum(accepted)
    return {rid: next_tokens[i][: accepted[i] + 1] for i, rid in enumerate(ids)}
