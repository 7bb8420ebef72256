"""The row remap of the serving loop on the device: ``spec_batch_row_remap`` over a staging area of fixed rows.

A step's state lives in the rows of its bucket's buffers; when requests leave or join, the next
step's rows take it from elsewhere: a continuing request from its row of the last step, a joining
request from what its prefill left, a request that sat a step out from where it was held.
``RowStage`` keeps every such source in one set of ``R = 2 * max_batch`` staging rows with stable
addresses, and the kernel family gathers them (``docs/kernels.md``, ``spec_batch_row_remap``):

* rows ``0 .. max_batch - 1``: the last step's rows, copied from its bucket before the remap;
* rows ``max_batch + k``: held slot ``k``, written when a request's prefill ends (the last prefix
  token, the bonus token as the prefill left it on the device, the length; ``accepted`` 0) or when a
  running request sits a step out (its row, copied).

The family writes the step's rows into the staging outputs, which are copied into the bucket; the
hidden states the MTP head reads move by ``hidden_src`` (a gather of ``verify_hidden``, whose rows
``max_batch * W ..`` are the held slots').  Nothing is read back: the sources, the row indices and the
tables are device tensors or host values written into them, so a remap costs no host synchronization.
On a GPU the whole move (the last step's rows in, the kernel, the bucket's rows out) is captured at
set-up as one graph per pair of buckets (``capture``): a transition uploads ``src_rows`` and the
tables from pinned memory and replays one graph.

``specgen`` runs the built variant of the loop's layout (``c`` on the CPU, ``cuda`` on a GPU) when
the library has it and its guards hold for the step's length bounds; otherwise, and in the other
modes, the family's torch semantics, with the reason (``not_built``, ``guard_failed``, ``mode``).
"""

from __future__ import annotations

import functools

import torch

from ...runtime.buffers import alloc_step_buffers
from ...runtime.semantics import run_semantics
from ...specializations.families import FAMILIES, ROW_REMAP
from ..graphs import CapturedGraph

__all__ = ["MOVED", "RowStage", "remap_kernel"]

I32 = torch.int32
# what a row carries to the next step: the family's sources (src_<name>) and outputs of the same name
MOVED = ("tokens", "accepted", "next_last_token", "next_seq_lens")
OUTPUTS = ("tokens", "accepted", "next_last_token", "next_seq_lens", "draft_positions", "draft_slots", "hidden_rows")


class RowStage:
    """Staging rows for ``max_batch`` step rows and ``max_batch`` held slots; see the module docstring."""

    def __init__(self, max_batch: int, width: int, block_table_width: int, block_size: int, scratch_block: int, device):
        self.max_batch, self.width, self.block_size = int(max_batch), int(width), int(block_size)
        self.rows = 2 * self.max_batch
        self.bufs = alloc_step_buffers(
            self.rows,
            self.width,
            block_table_width,
            block_size=self.block_size,
            scratch_block=scratch_block,
            device=device,
            fill_padding=True,
        )
        self.bufs["src_rows"].fill_(-1)
        self.args = [self.bufs[a.name] for a in FAMILIES[ROW_REMAP].args]
        self.free = list(range(self.max_batch))  # held slots
        self.graphs: dict[tuple[int, int], CapturedGraph] = {}  # (last bucket, this bucket) -> captured ``move``

    def src(self, name: str) -> torch.Tensor:
        return self.bufs[f"src_{name}"]

    def row_of_slot(self, k: int) -> int:
        return self.max_batch + k

    def hold(self) -> int:
        """A free held slot (its staging row is ``row_of_slot``)."""
        return self.free.pop(0)

    def release(self, k: int) -> None:
        self.free.append(k)

    def take_step(self, bufs: dict, rows: int) -> None:
        """Rows ``:rows`` of the last step's buffers become staging rows ``:rows``."""
        W = self.width
        self.src("tokens")[: rows * W].copy_(bufs["tokens"][: rows * W])
        for name in MOVED[1:]:
            self.src(name)[:rows].copy_(bufs[name][:rows])

    def park(self, bufs: dict, i: int, to: int) -> None:
        """Row ``i`` of the last step's buffers into staging row ``to`` (a held slot's)."""
        W = self.width
        self.src("tokens")[to * W : (to + 1) * W].copy_(bufs["tokens"][i * W : (i + 1) * W])
        for name in MOVED[1:]:
            self.src(name)[to].copy_(bufs[name][i])

    def join(self, row: int, last_token: int, bonus: torch.Tensor, length: int) -> None:
        """A prefill's end in staging row ``row``: repair token, bonus (a device value), count 0, length."""
        W = self.width  # fill_ with a host value launches a kernel; ``t[i] = value`` would copy it up and wait
        self.src("tokens")[row * W + 1 : (row + 1) * W].fill_(0)
        self.src("tokens")[row * W : row * W + 1].fill_(int(last_token))
        self.src("accepted")[row : row + 1].fill_(0)
        self.src("next_last_token")[row : row + 1].copy_(bonus.reshape(1))
        self.src("next_seq_lens")[row : row + 1].fill_(int(length))

    def remap(
        self, src_rows: list[int], table: torch.Tensor, kernel, bounds: tuple[int, int], step: tuple
    ) -> str | None:
        """Move the rows of a step: ``src_rows[i]`` (a staging row) into row ``i`` of the step's bucket (rows past
        them: no source).  ``kernel``: the built variant or None; ``step``: ``(prev, prev_rows, dst, rows, hidden)``
        for ``move``.  Returns why it ran the torch semantics (None: the kernel ran, in the transition's graph
        where one was captured)."""
        n, b = len(src_rows), self.bufs
        rows = torch.full((self.rows,), -1, dtype=I32)
        rows[:n] = torch.tensor(src_rows, dtype=I32)
        dev = b["src_rows"].device
        b["src_rows"].copy_(rows.pin_memory() if dev.type == "cuda" else rows, non_blocking=dev.type == "cuda")
        b["block_table"][:n].copy_(table, non_blocking=True)
        reason = "mode" if kernel is None else None
        if kernel is not None and not kernel.check_guards(
            min_seq_len=bounds[0], max_seq_len=bounds[1], batch=self.rows
        ):
            reason = "guard_failed"
        prev, dst = step[0], step[2]
        graph = self.graphs.get((id(prev), id(dst))) if reason is None else None
        if graph is not None:
            graph()
        else:
            self.move(*step, kernel if reason is None else None)
        return reason

    def move(self, prev: dict | None, prev_rows: int, dst: dict, rows: int, hidden, kernel) -> None:
        """A transition's device work: the last step's ``prev_rows`` rows into the staging rows, the family (the
        built ``kernel``, or its torch semantics for None), the bucket's ``rows`` rows and hidden states out."""
        if prev is not None:
            self.take_step(prev, prev_rows)
        if kernel is not None:
            kernel(*self.args)
        else:
            run_semantics(ROW_REMAP, self.bufs, block_size=self.block_size)
        self.write(dst, hidden, rows)

    def capture(self, buckets: dict[int, dict], hidden, kernel, device) -> None:
        """On a GPU, at set-up: ``move`` with the built kernel as one captured graph per (last step's bucket, this
        step's bucket), so a transition is two uploads and one replay.  (The warm-ups write empty rows into the
        buckets, which every step pads or overwrites.)"""
        for prev_rows, prev in buckets.items():
            for rows, dst in buckets.items():
                fn = functools.partial(self.move, prev, prev_rows, dst, rows, hidden, kernel)
                self.graphs[(id(prev), id(dst))] = CapturedGraph(fn, device)

    def write(self, dst: dict, hidden: torch.Tensor | None, n: int) -> None:
        """The remapped rows ``:n`` into a bucket's buffers, and the verify rows' hidden states they take."""
        W, b = self.width, self.bufs
        for name in OUTPUTS:
            k = W if name == "tokens" else 1
            dst[name][: n * k].copy_(b[name][: n * k])
        if hidden is not None:
            taken = hidden.index_select(0, b["hidden_src"][: n * W].long().clamp(min=0))
            hidden[: n * W].copy_(taken)


def remap_kernel(loop):
    """The built ``spec_batch_row_remap`` of ``loop``'s layout (``specgen``), or None and why the row remap
    runs its torch semantics (``mode``: not ``specgen``; ``not_built``: the folder lacks the variant)."""
    lib = loop.engine.library
    if loop.mode != "specgen" or lib is None:
        return None, "mode"
    W, BT, BS = loop.width, loop.block_table_width, loop.block_size
    target = {"cpu": "c", "cuda": "cuda"}.get(loop.device.type)
    if target is None or not lib.has(ROW_REMAP, W, BT, BS, target=target):
        return None, "not_built"
    return lib.get(ROW_REMAP, W, BT, BS, target=target), None
