"""The decode step's per-row state in a serving loop: which request each row holds, and moving it.

A decode step's state lives in rows of the step buffers (the drafts' inputs, the last tokens,
the lengths, the block tables), in the verify rows' hidden states that the MTP head reads,
and, for ``baseline``, in the host's copies of them.  When requests leave or join the batch,
``remap_rows`` moves the rows that stay to the new order (one gather and one ``index_copy``
per buffer on the CPU; on a device a kernel of its own would do it inside the captured
step), ``join_row`` writes a row from a request's prefill, and a running request that sits a
step out (its blocks are still in flight) is parked (``take_row``) and put back
(``put_row``).  ``BatchRows`` keeps the bookkeeping between steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ...runtime.buffers import alloc_step_buffers
from ...runtime.semantics import slot
from ..acceptance import AcceptanceMix

__all__ = ["BatchRows", "Joined", "RowAcceptance", "join_row", "pad_rows", "remap_rows", "row_layout"]

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
    """The row state of a running request that sat a step out (its blocks were still in flight)."""

    row: int
    dev: dict
    host: dict | None
    hidden: torch.Tensor


class RowAcceptance:
    """An ``AcceptanceMix`` bound per request id, looked up for the rows of one step."""

    def __init__(self, mix: AcceptanceMix, ids: list[int]):
        idx = torch.tensor(ids, dtype=torch.long, device=mix.oracle.device)
        self.p, self.seed = mix.p, mix.seed
        self.oracle, self.hit, self.other = mix.oracle[idx], mix.hit[idx], mix.other[idx]

    _pick = AcceptanceMix._pick
    apply = AcceptanceMix.apply


def join_row(
    bufs: dict, host: dict | None, hidden: torch.Tensor, i: int, j: Joined, block_size: int, scratch_slot: int
):
    """Row ``i`` starts from its prefill: the draft's repair row is the last prefix token at ``P - 1`` (its KV
    is written: the scratch slot), the new row the bonus token at ``P`` with the hidden state of ``P - 1``.
    Reads row ``i``'s block table, so the table is written first."""
    W = bufs["tokens"].shape[0] // bufs["accepted"].shape[0]
    base = i * W
    bufs["tokens"][base] = j.last_token
    bufs["accepted"][i] = 0
    bufs["next_last_token"][i] = j.bonus
    bufs["next_seq_lens"][i] = j.length
    bufs["draft_positions"][i, 0], bufs["draft_positions"][i, 1] = j.length - 1, j.length
    pos = torch.tensor([[j.length]], device=bufs["block_table"].device)
    bufs["draft_slots"][i, 0] = scratch_slot
    bufs["draft_slots"][i, 1] = slot(bufs["block_table"][i : i + 1], pos, block_size)[0, 0]
    bufs["hidden_rows"][i] = base
    if j.hidden is not None:  # a block draft reads no hidden state across steps
        hidden[base].copy_(j.hidden)
    if host is not None:
        host["accepted"][i] = 0
        host["h_last"][i] = j.bonus
        host["h_seq"][i] = j.length


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


@dataclass
class BatchRows:
    """Which request each row of the last decode step held, and the state of requests between rows.

    ``joined``: requests whose prefill finished (their first step starts from it); ``parked``:
    running requests that sat a step out.
    """

    layout: dict
    width: int
    block_size: int
    scratch_block: int
    scratch_slot: int
    ids: list = field(default_factory=list)  # request ids of the last decode step's rows
    bufs: tuple | None = None  # the (device, host) buffers those rows live in
    joined: dict = field(default_factory=dict)
    parked: dict = field(default_factory=dict)

    def drop(self, rid: int) -> None:
        """``rid`` finished or was preempted: whatever it left between rows is gone."""
        self.joined.pop(rid, None)
        self.parked.pop(rid, None)

    def place(
        self,
        ids: list[int],
        table: torch.Tensor,
        dst: dict,
        hdst: dict | None,
        launched: int,
        hidden: torch.Tensor,
        running: set[int],
    ) -> tuple[int, int]:
        """Put the state of request ``ids[i]`` into row ``i`` of ``dst`` (``hdst``, ``hidden``), tables from
        ``table``; rows ``len(ids):launched`` become padding.  Returns (remaps, rows joined)."""
        W, n = self.width, len(ids)
        hlayout = {**self.layout, **HOST_ROWS}
        prev = {rid: i for i, rid in enumerate(self.ids)}
        if self.bufs is not None:  # park the running requests that sit this step out (blocks in flight)
            src, hsrc = self.bufs
            for rid, i in prev.items():
                if rid not in ids and rid in running and rid not in self.joined:
                    host = take_row(hsrc, hlayout, i) if hsrc is not None else None
                    self.parked[rid] = Parked(
                        i, take_row(src, self.layout, i), host, hidden[i * W : (i + 1) * W].clone()
                    )
        src_rows = [prev[r] if r in prev and r not in self.joined and r not in self.parked else -1 for r in ids]
        remaps = 0
        if any(r >= 0 for r in src_rows):
            src, hsrc = self.bufs
            if src is not dst or any(r >= 0 and r != i for i, r in enumerate(src_rows)):
                remap_rows(dst, src, self.layout, src_rows, W)
                remap_rows({"h": hidden}, {"h": hidden}, {"h": W}, src_rows, W)
                if hdst is not None:
                    remap_rows(hdst, hsrc, hlayout, src_rows, W)
                remaps = 1
        joining = []
        for i, rid in enumerate(ids):
            if src_rows[i] >= 0:
                continue
            if rid in self.joined:
                joining.append((i, self.joined.pop(rid)))
            elif rid in self.parked:
                p = self.parked.pop(rid)
                put_row(dst, self.layout, i, p.dev, p.row, W)
                hidden[i * W : (i + 1) * W].copy_(p.hidden)
                if hdst is not None:
                    put_row(hdst, hlayout, i, p.host, p.row, W)
            else:
                raise AssertionError(f"request {rid} decodes without a prefill or a row")
        dst["block_table"][:n].copy_(table)  # the tables as grown for this step (a parked row's is older)
        if hdst is not None:
            hdst["block_table"].copy_(table.cpu())
        for i, j in joining:  # reads the row's table
            join_row(dst, hdst, hidden, i, j, self.block_size, self.scratch_slot)
        # what the draft's carry writes; the runtime checks the table against it before the step
        dst["seq_lens"][:n].copy_(dst["next_seq_lens"][:n])
        dst["last_tokens"][:n].copy_(dst["next_last_token"][:n])
        if launched > n:
            pad_rows(dst, n, self.scratch_block, self.scratch_slot)
        self.ids, self.bufs = list(ids), (dst, hdst)
        return remaps, sum(r < 0 for r in src_rows)
