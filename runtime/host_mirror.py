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

    def copy(self, result, batch: int) -> None:
        """Non-blocking copies of ``result``'s host fields on the copy stream, then that slot's event.

        ``result`` is a ``StepResult``; when it is not a fast-path result its
        tensors are fresh, so the copy stream keeps their memory until it ran.
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
            self._events[slot].record(copy)
        self._steps = (self._steps + [(slot, batch)])[-2:]

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
