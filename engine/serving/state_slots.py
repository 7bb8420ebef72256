"""A hybrid target's linear-state slots in the serving loop: ``W`` slots per request, not per row.

A verification reads the committed state from one of the sequence's ``W`` slots and
writes the state after each verify row ``j`` into its slot ``j``
(``engine/linear_state.py``).  Under continuous batching a request changes rows, so
the slots belong to the request: ``StateSlots`` hands each admitted request a group
of ``W`` slots from a free list, the loop writes the group into the row's
``state_slots`` whenever the request runs, and the group comes back once every step
that could write it completed (as KV blocks do: a ``BlockPool`` of groups of one
"position" each, group 0 never handed out)::

    slots = StateSlots(model, groups=9, width=4, device=dev)   # 8 requests at once
    slots.take(7)                  # (4, 5, 6, 7): request 7's slots 0..3
    slots.release(7, after_step=12); slots.retire(12)

A request's prefill starts from the zero state and each chunk's last row writes the
state after it into the request's slot 0; the next chunk reads it, and so does the
first verification (its ``accepted`` is 0).  A preempted request's group is released
and its state recomputed from the zero state on readmission.
"""

from __future__ import annotations

import torch

from ...models.errors import EngineError
from ..linear_state import LinearState
from .block_pool import BlockPool
from .rows import upload

__all__ = ["StateSlots"]

I32 = torch.int32


class StateSlots:
    """Groups of ``width`` slots of ``model``'s linear-state pool for ``groups - 1`` requests at once."""

    verify_kwargs = staticmethod(LinearState.verify_kwargs)  # what the verify forward reads (the engine's hook)

    def __init__(self, model, groups: int, width: int, device):
        self.model, self.width, self.device = model, int(width), device
        self.pool = model.allocate_linear_state(int(groups) * self.width)
        self.groups = BlockPool(num_blocks=int(groups), block_size=1)

    def take(self, rid: int) -> tuple[int, ...]:
        """A fresh group for request ``rid`` (at the start of its prefill)."""
        if self.groups.table(rid):
            raise AssertionError(f"request {rid} already holds linear-state slots")
        if not self.groups.can_grow(rid, 1):
            raise EngineError(f"no free linear-state slots for request {rid} ({self.groups.pending_count} in flight)")
        return self.slots(rid, self.groups.grow(rid, 1))

    def slots(self, rid: int, table: tuple[int, ...] | None = None) -> tuple[int, ...]:
        """Request ``rid``'s ``W`` slots."""
        g = (table or self.groups.table(rid))[0]
        return tuple(range(g * self.width, (g + 1) * self.width))

    def release(self, rid: int, after_step: int) -> None:
        """``rid`` finished or was preempted: its group comes back once step ``after_step`` completed."""
        self.groups.release(rid, after_step=after_step)

    def retire(self, step: int) -> None:
        self.groups.retire(step)

    def prefill_kwargs(self, rid: int, start: int, rows: int) -> dict:
        """A prefill chunk of ``rows`` rows at ``start``: the zero state (``start == 0``) or slot 0 in, its last
        row's state into slot 0; the first chunk takes the request's group."""
        first = (self.take(rid) if start == 0 else self.slots(rid))[0]
        write = torch.full((rows,), -1, dtype=I32)  # on the host, then up without a synchronization
        write[-1] = first
        read = torch.tensor([first if start > 0 else -1], dtype=I32)
        return {"state_read": upload(read, self.device), "state_write": upload(write, self.device)}

    def row_slots(self, ids: list[int], rows: int) -> torch.Tensor:
        """``state_slots[rows, W]`` of a step over requests ``ids`` (rows past them: -1, no write)."""
        out = torch.full((rows, self.width), -1, dtype=I32)
        for i, rid in enumerate(ids):
            out[i] = torch.tensor(self.slots(rid), dtype=I32)
        return out

    def committed(self, slot: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The ``(state, window)`` of every linear layer in ``slot``."""
        s = torch.tensor([slot], dtype=I32, device=self.device)
        return [tuple(t[0] for t in self.pool.read(layer, s)) for layer in range(len(self.pool.recurrent))]

    def snapshot(self):
        return self.pool.snapshot()

    def restore(self, saved) -> None:
        self.pool.restore(saved)
