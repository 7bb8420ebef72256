"""Host copies of a verify step's results, off the critical path.

The fields the host reads (``accepted``, ``next_tokens``, ``next_last_token``,
``next_seq_lens``) go to pinned host buffers with ``non_blocking`` copies on
a side copy stream, followed by an event.  There are two sets of host
buffers, used in turn, so the copy of a step in flight never overwrites what
the host is reading from the step before: an engine that enqueues step ``i``
before consuming step ``i - 1`` reads ``result(steps_back=1)`` and finds it
complete.  A result stays readable until two later steps are copied.

The next writes to the device buffers a copy reads must wait for it:
``wait_latest`` orders the current stream after the latest copy's event, on
the device, without a host synchronization.

A copy may carry the device guard's flag too (``copy(..., flag=...)``);
``poll_flag`` reads the flags of the copies already complete (``Event.query``,
which never blocks) and so sees a step's flag one or two steps late, with no
host synchronization of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["HOST_FIELDS", "HostMirror", "HostResult"]

HOST_FIELDS = ("accepted", "next_tokens", "next_last_token", "next_seq_lens")
I32 = torch.int32


@dataclass(frozen=True)
class HostResult:
    accepted: torch.Tensor
    next_tokens: torch.Tensor
    next_last_token: torch.Tensor
    next_seq_lens: torch.Tensor


class HostMirror:
    """Double-buffered pinned host copies of the host fields, one event per buffer set.

    ``api`` is a ``DeviceAPI`` (or anything with its ``new_stream``,
    ``current_stream``, ``stream`` and ``event``).
    """

    def __init__(self, api, device, max_batch: int, width: int, *, pin: bool = True):
        self._api, self._device = api, device
        self.copy_stream = api.new_stream(device)
        self._slots: list[dict[str, torch.Tensor]] = []
        self._events: list = []
        for _ in range(2):  # double-buffered so a step in flight never overwrites what the host reads
            self._slots.append({
                "accepted": torch.empty(max_batch, dtype=I32, pin_memory=pin),
                "next_tokens": torch.empty(max_batch, width, dtype=I32, pin_memory=pin),
                "next_last_token": torch.empty(max_batch, dtype=I32, pin_memory=pin),
                "next_seq_lens": torch.empty(max_batch, dtype=I32, pin_memory=pin),
            })
            self._events.append(api.event())
        self._turn = 0
        self._steps: list[tuple[int, int]] = []  # (slot, batch) of the latest two steps, newest last
        self._flags = [torch.zeros(1, dtype=I32, pin_memory=pin) for _ in range(2)]
        self._flag_copy = [0, 0]  # which copy (1, 2, ...) each slot's flag belongs to; 0: none
        self.copies = 0  # copies made so far

    def copy(self, result, batch: int, flag: torch.Tensor | None = None) -> None:
        """Non-blocking copies of ``result``'s host fields on the copy stream, then that slot's event.

        ``result`` is a ``StepResult``; when it is not a fast-path result its
        tensors are fresh, so the copy stream keeps their memory until it ran.
        ``flag`` (a persistent device tensor of shape ``(1,)``) is copied along.
        """
        slot = self._turn
        self._turn ^= 1
        host, copy = self._slots[slot], self.copy_stream
        copy.wait_stream(self._api.current_stream(self._device))
        with self._api.stream(copy):
            for n in HOST_FIELDS:
                src = getattr(result, n)
                if not result.fast_path:
                    src.record_stream(copy)
                host[n][:batch].copy_(src, non_blocking=True)
            if flag is not None:
                self._flags[slot].copy_(flag, non_blocking=True)
            self._events[slot].record(copy)
        self._steps = (self._steps + [(slot, batch)])[-2:]
        self.copies += 1
        self._flag_copy[slot] = self.copies if flag is not None else 0

    def poll_flag(self, newer_than: int = 0) -> int:
        """The OR of the flags of complete copies made after copy number ``newer_than``; never blocks.

        A copy still in flight counts as 0; its flag is seen by a later poll
        (the device flag is sticky, so a later copy carries it too).
        """
        bits = 0
        for slot in (0, 1):
            if self._flag_copy[slot] > newer_than and self._events[slot].query():
                bits |= int(self._flags[slot][0])
        return bits

    def wait_latest(self) -> None:
        """Order the current stream's next work after the latest copy (which reads the device buffers)."""
        if self._steps:
            self._api.current_stream(self._device).wait_event(self._events[self._steps[-1][0]])

    def result(self, steps_back: int = 0) -> HostResult | None:
        """The latest (``steps_back=0``) or the previous (1) step's host copy; waits on its event only.

        None when no such step was copied.
        """
        if steps_back not in (0, 1):
            raise ValueError("steps_back must be 0 (latest step) or 1 (the one before)")
        if len(self._steps) <= steps_back:
            return None
        slot, batch = self._steps[-1 - steps_back]
        self._events[slot].synchronize()
        host = self._slots[slot]
        return HostResult(**{n: host[n][:batch] for n in HOST_FIELDS})
