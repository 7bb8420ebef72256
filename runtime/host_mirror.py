"""Host copies of a verify step's results, off the critical path.

The fields the host reads (``accepted``, ``next_tokens``, ``next_last_token``,
``next_seq_lens``, and the device guard's flag when given) are packed, on the
step's own stream, into one device staging buffer (one ``torch.cat``), and
that buffer goes to pinned host memory as one ``non_blocking`` copy on a side
copy stream, followed by an event.  The copy reads only the staging buffer,
never the step buffers, so the next step's work never waits for it: a copy
is one memcpy on the copy stream beside the next step, not five small ones
in front of it.

There are two staging buffers and two sets of host buffers, used in turn, so
the copy of a step in flight never overwrites what the host is reading from
the step before: an engine that enqueues step ``i`` before consuming step
``i - 1`` reads ``result(steps_back=1)`` and finds it complete.  A result
stays readable until two later steps are copied.  Packing into a staging
buffer first waits, on the device, for the copy that last read it (the one
two steps back, which the host has normally consumed already).

``poll_flag`` reads the flags of the copies already complete
(``Event.query``, which never blocks) and so sees a step's flag one or two
steps late, with no host synchronization of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["HOST_FIELDS", "HostMirror", "HostResult", "packed_size"]

HOST_FIELDS = ("accepted", "next_tokens", "next_last_token", "next_seq_lens")
I32 = torch.int32


def packed_size(rows: int, width: int) -> int:
    """Entries of a packed step of ``rows`` sequences: the host fields, then the flag."""
    return rows * (width + 3) + 1


def _unpack(flat: torch.Tensor, batch: int, width: int) -> dict[str, torch.Tensor]:
    """The host fields of a step packed for ``batch`` sequences."""
    out, at = {}, 0
    for n in HOST_FIELDS:
        size = batch * width if n == "next_tokens" else batch
        t = flat[at : at + size]
        out[n] = t.view(batch, width) if n == "next_tokens" else t
        at += size
    return out


@dataclass(frozen=True)
class HostResult:
    accepted: torch.Tensor
    next_tokens: torch.Tensor
    next_last_token: torch.Tensor
    next_seq_lens: torch.Tensor


class HostMirror:
    """Double-buffered packed host copies of the host fields, one event per buffer set.

    ``api`` is a ``DeviceAPI`` (or anything with its ``new_stream``,
    ``current_stream``, ``stream`` and ``event``).
    """

    def __init__(self, api, device, max_batch: int, width: int, *, pin: bool = True):
        self._api, self._device, self.width = api, device, int(width)
        self.copy_stream = api.new_stream(device)
        n = packed_size(max_batch, width)
        # two of each, so a step in flight never overwrites what the host reads
        self._staging = [torch.zeros(n, dtype=I32, device=device) for _ in range(2)]
        self._host = [torch.zeros(n, dtype=I32, pin_memory=pin) for _ in range(2)]
        # (slot, batch) -> the one-element view of that packing's flag: a poll reads it with ``item`` and no
        # indexing op (the host's step loop pays every microsecond where the device step is short)
        self._flag_views: dict[tuple[int, int], torch.Tensor] = {}
        self._no_flag = torch.zeros(1, dtype=I32, device=device)
        self._events = [api.event() for _ in range(2)]
        self._used = [False, False]  # whether a copy was ever made from each slot
        self._turn = 0
        self._steps: list[tuple[int, int]] = []  # (slot, batch) of the latest two steps, newest last
        self._flag_copy = [0, 0]  # which copy (1, 2, ...) each slot's flag belongs to; 0: none
        self.copies = 0  # copies made so far

    def copy(self, result, batch: int, flag: torch.Tensor | None = None) -> None:
        """Pack ``result``'s host fields (and ``flag``) on the current stream, copy them to the host on the copy
        stream, then record that slot's event.

        ``result`` is a ``StepResult`` (or anything with the host fields); its
        fields may be views of persistent buffers with at least ``batch`` rows.
        ``flag`` (a device tensor of shape ``(1,)``) is packed along.
        """
        slot = self._turn
        self._turn ^= 1
        main, copy = self._api.current_stream(self._device), self.copy_stream
        if self._used[slot]:
            main.wait_event(self._events[slot])  # the copy that last read this staging buffer
        n = packed_size(batch, self.width)
        fields = [getattr(result, f)[:batch].reshape(-1) for f in HOST_FIELDS]
        packed_flag = self._no_flag if flag is None else flag if flag.shape == (1,) else flag.reshape(-1)[:1]
        torch.cat(fields + [packed_flag], out=self._staging[slot][:n])
        copy.wait_stream(main)
        with self._api.stream(copy):
            self._host[slot][:n].copy_(self._staging[slot][:n], non_blocking=True)
            self._events[slot].record(copy)
        self._used[slot] = True
        self._steps = (self._steps + [(slot, batch)])[-2:]
        self.copies += 1
        self._flag_copy[slot] = self.copies if flag is not None else 0

    def poll_flag(self, newer_than: int = 0) -> int:
        """The OR of the flags of complete copies made after copy number ``newer_than``; never blocks.

        A copy still in flight counts as 0; its flag is seen by a later poll
        (the device flag is sticky, so a later copy carries it too).
        """
        bits = 0
        for slot, batch in self._steps:
            if self._flag_copy[slot] > newer_than and self._events[slot].query():
                view = self._flag_views.get((slot, batch))
                if view is None:
                    at = packed_size(batch, self.width) - 1
                    view = self._flag_views[slot, batch] = self._host[slot][at : at + 1]
                bits |= int(view.item())
        return bits

    def wait_latest(self) -> None:
        """Order the current stream's next work after the latest copy (it reads only a staging buffer, so
        nothing needs this for correctness; kept for callers that want the copy finished on the device)."""
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
        return HostResult(**_unpack(self._host[slot], batch, self.width))
