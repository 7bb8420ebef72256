"""The decode step's per-row state in a serving loop: which request each row holds, and moving it.

A decode step's state lives in rows of the step buffers (the drafts' inputs, the last tokens,
the lengths, the block tables), in the verify rows' hidden states that the MTP head reads,
and, for ``baseline``, in the host's copies of them.  When requests leave or join the batch,
the kernel family ``spec_batch_row_remap`` moves every row of the next step from its source
on the device (``remap.py``: the rows that stay from the last step's rows, a joining row from
what its prefill left there, a running request that sat a step out, its blocks still in flight,
from where it was held); ``baseline``'s host copies move by ``remap_rows`` (one gather and one
``index_copy`` per buffer; ``take_row`` / ``put_row`` for a parked row).  ``BatchRows`` keeps the
bookkeeping between steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ...runtime.buffers import alloc_step_buffers
from ..acceptance import AcceptanceMix
from .remap import RowStage

__all__ = ["BatchRows", "Joined", "RowAcceptance", "pad_rows", "remap_rows", "row_layout", "upload"]

I32 = torch.int32
HOST_ROWS = {"h_last": 1, "h_seq": 1}  # the baseline's host copies of the last tokens and lengths


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


def take_row(bufs: dict[str, torch.Tensor], layout: dict[str, int], row: int) -> dict[str, torch.Tensor]:
    return {n: _rows(bufs[n], k)[row].clone() for n, k in layout.items() if n in bufs}


def put_row(bufs, layout, row: int, state: dict, from_row: int, width: int) -> None:
    for n, k in layout.items():
        if n not in state or n not in bufs:
            continue
        v = state[n]
        if n == "hidden_rows":
            v = v + (row - from_row) * width
        _rows(bufs[n], k)[row].copy_(v)


@dataclass
class Joined:
    """What a request's first decode step starts from, left by the last chunk of its prefill."""

    last_token: int  # the prefix's last token (position P - 1)
    bonus: int  # the prefill's token (position P)
    hidden: torch.Tensor | None  # the target's hidden state at P - 1, as the MTP head reads it (None: a block draft)
    length: int  # P


@dataclass
class Parked:
    """A running request that sat a step out (its blocks were still in flight): its last row and ``baseline``'s
    host copies of it (its device state waits in a held slot of the stage)."""

    row: int
    host: dict | None


class RowAcceptance:
    """An ``AcceptanceMix`` bound per request id, looked up for the rows of one step."""

    def __init__(self, mix: AcceptanceMix, ids: list[int]):
        idx = upload(torch.tensor(ids, dtype=torch.long), mix.oracle.device)
        self.mix, self.p, self.seed = mix, mix.p, mix.seed
        self.oracle, self.hit, self.other = mix.oracle[idx], mix.hit[idx], mix.other[idx]

    def fill(self, ids: list[int]) -> None:
        """The rows of requests ``ids`` (as many as at construction), in place: a captured draft keeps reading
        these tensors."""
        idx = upload(torch.tensor(ids, dtype=torch.long), self.mix.oracle.device)
        for name in ("oracle", "hit", "other"):
            torch.index_select(getattr(self.mix, name), 0, idx, out=getattr(self, name))

    _pick = AcceptanceMix._pick
    apply = AcceptanceMix.apply


def pad_rows(bufs: dict, n: int, scratch_block: int, scratch_slot: int) -> None:
    """Rows ``n:`` of a bucket: length 0 on the scratch block, drafting and verifying nothing real."""
    rows = bufs["accepted"].shape[0]
    W = bufs["tokens"].shape[0] // rows
    bufs["block_table"][n:].fill_(scratch_block)
    zero = ("next_seq_lens", "next_last_token", "accepted", "seq_lens", "last_tokens", "draft_positions")
    for name in (*zero, "draft_tokens"):
        bufs[name][n:].fill_(0)
    bufs["tokens"][n * W :].fill_(0)
    bufs["draft_slots"][n:].fill_(scratch_slot)
    own = torch.arange(n, rows, device=bufs["hidden_rows"].device, dtype=I32) * W
    bufs["hidden_rows"][n:].copy_(own[:, None].expand(-1, bufs["hidden_rows"].shape[1]))


def upload(t: torch.Tensor, device) -> torch.Tensor:
    """A host tensor on ``device`` without a host synchronization (pinned, non-blocking on a GPU)."""
    if device.type == "cpu":
        return t
    return t.pin_memory().to(device, non_blocking=True)


@dataclass
class BatchRows:
    """Which request each row of the last decode step held, and the state of requests between rows.

    ``joined``: requests whose prefill finished (their first step starts from it); ``parked``:
    running requests that sat a step out.  Both hold a slot of ``stage`` (``remap.py``) with their
    device state; ``joined`` / ``parked`` keep the host values ``baseline``'s host copies need.
    ``kernel``: the built ``spec_batch_row_remap`` the device remap runs (``None``: its torch
    semantics, for the reason ``why_torch``).
    """

    layout: dict
    width: int
    block_size: int
    scratch_block: int
    scratch_slot: int
    stage: RowStage
    kernel: object = None
    why_torch: str = "mode"
    ids: list = field(default_factory=list)  # request ids of the last decode step's rows
    bufs: tuple | None = None  # the (device, host) buffers those rows live in
    joined: dict = field(default_factory=dict)
    parked: dict = field(default_factory=dict)
    slots: dict = field(default_factory=dict)  # request id -> its held slot in ``stage``

    def drop(self, rid: int) -> None:
        """``rid`` finished or was preempted: whatever it left between rows is gone."""
        self.joined.pop(rid, None)
        self.parked.pop(rid, None)
        if rid in self.slots:
            self.stage.release(self.slots.pop(rid))

    def join(self, rid: int, j: Joined, bonus: torch.Tensor | None, hidden: torch.Tensor | None) -> int:
        """Request ``rid``'s prefill ended: its first step's state goes to a held slot on the device (``bonus``
        the prefill's token as a device value; ``hidden`` the MTP's verify hidden states, None for a block draft);
        the slot's staging row.  ``bonus`` None: the slot is held and the host's record kept, and the caller writes
        the row (a prefill graph does: ``prefill_graphs.py``)."""
        self.drop(rid)
        k = self.slots[rid] = self.stage.hold()
        row = self.stage.row_of_slot(k)
        if bonus is not None:
            self.stage.join(row, j.last_token, bonus, j.length)
            if j.hidden is not None and hidden is not None:
                hidden[row * self.width].copy_(j.hidden)
        self.joined[rid] = Joined(j.last_token, j.bonus, None, j.length)
        return row

    def _park(self, rid: int, i: int, src: dict, hsrc: dict | None, hidden: torch.Tensor | None) -> None:
        """Running request ``rid`` sits this step out: row ``i`` of the last step goes to a held slot."""
        W, hlayout = self.width, {**self.layout, **HOST_ROWS}
        k = self.slots[rid] = self.stage.hold()
        row = self.stage.row_of_slot(k)
        self.stage.park(src, i, row)
        if hidden is not None:
            hidden[row * W : (row + 1) * W].copy_(hidden[i * W : (i + 1) * W])
        self.parked[rid] = Parked(i, take_row(hsrc, hlayout, i) if hsrc is not None else None)

    def place(
        self,
        ids: list[int],
        table: torch.Tensor,
        dst: dict,
        hdst: dict | None,
        launched: int,
        hidden: torch.Tensor | None,
        running: set[int],
        bounds: tuple[int, int],
    ) -> tuple[int, int, str | None]:
        """Put the state of request ``ids[i]`` into row ``i`` of ``dst`` (``hdst``, ``hidden``: the MTP's verify
        hidden states, None for a block draft), tables from ``table`` (a host tensor); rows
        ``len(ids):launched`` become padding.  ``bounds``: the rows' next lengths (the remap's guards).
        Returns (remaps, rows joined, why the device remap ran the torch semantics: None if it ran the kernel
        or nothing moved)."""
        W, n = self.width, len(ids)
        hlayout = {**self.layout, **HOST_ROWS}
        prev = {rid: i for i, rid in enumerate(self.ids)}
        if self.bufs is not None:  # park the running requests that sit this step out (blocks in flight)
            src, hsrc = self.bufs
            for rid, i in prev.items():
                if rid not in ids and rid in running and rid not in self.slots:
                    self._park(rid, i, src, hsrc, hidden)
        src_rows = [prev[r] if r in prev and r not in self.slots else -1 for r in ids]
        fresh = [i for i, r in enumerate(src_rows) if r < 0]
        for i in fresh:
            if ids[i] not in self.slots:
                raise AssertionError(f"request {ids[i]} decodes without a prefill or a row")
        moved = any(r >= 0 and r != i for i, r in enumerate(src_rows))
        carried = any(r >= 0 for r in src_rows) and (moved or self.bufs[0] is not dst)
        remaps, reason = int(carried), None
        table_dev = upload(table, dst["block_table"].device)
        if carried or fresh:  # the device remap: every row of the step from its staging row
            prev = self.bufs[0] if self.bufs is not None else None
            step = (prev, prev["accepted"].shape[0] if prev is not None else 0, dst, launched, hidden)
            rows = [r if r >= 0 else self.stage.row_of_slot(self.slots[ids[i]]) for i, r in enumerate(src_rows)]
            reason = self.stage.remap(rows, table_dev, self.kernel, bounds, step)
            if reason == "mode" and self.kernel is None:
                reason = self.why_torch
        if hdst is not None:  # baseline's host copies: the same moves in torch
            if carried:
                remap_rows(hdst, self.bufs[1], hlayout, src_rows, W)
            for i in fresh:
                rid = ids[i]
                if rid in self.joined:
                    j = self.joined[rid]
                    hdst["accepted"][i], hdst["h_last"][i], hdst["h_seq"][i] = 0, j.bonus, j.length
                else:
                    p = self.parked[rid]
                    put_row(hdst, hlayout, i, p.host, p.row, W)
            hdst["block_table"][:n].copy_(table)
        for i in fresh:
            rid = ids[i]
            self.joined.pop(rid, None)
            self.parked.pop(rid, None)
            self.stage.release(self.slots.pop(rid))
        dst["block_table"][:n].copy_(table_dev)  # the tables as grown for this step
        # what the draft's carry writes; the runtime checks the table against it before the step
        dst["seq_lens"][:n].copy_(dst["next_seq_lens"][:n])
        dst["last_tokens"][:n].copy_(dst["next_last_token"][:n])
        if launched > n:
            pad_rows(dst, n, self.scratch_block, self.scratch_slot)
        self.ids, self.bufs = list(ids), (dst, hdst)
        return remaps, len(fresh), reason
