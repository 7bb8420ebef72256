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

A captured step packs inside its own graph instead (``in_graph``, CUDA):
``pack_in_graph`` is the last work of the step's sequence and writes a bucket's
rows into one graph staging buffer, so no kernel is launched between one step's
graph and the next; ``copy_packed`` then copies it after the replay.  The
graph's next pack must not overwrite that buffer while its copy is in flight:
every copy of it records the external event ``copied``, and the sequence waits
on that event (``wait_copied``, an event wait node, on the step's side stream
early in the step where it has one) before it packs.  A graph-packed step's
fields sit at its bucket's row count, not its batch (``packed_size(rows, W)``).

``beside=False`` keeps every copy on the step's own stream instead of the copy stream: the stream's order
then keeps a pack from overwriting a staging buffer whose copy is queued before it, so a captured step needs
no event wait node (a graph with one is launched as a multi-stream graph: ``benchmarks/graph_shapes.py``).

``mapped=True`` makes no copies at all: the two host slots are one pinned ``[2, n]`` ring that kernels write
through its device address (``device_alias``; pinned memory is mapped into the device's address space).  A
pack ends with two kernels: an ``index_copy_`` of the staging into ring row ``turn`` (a one-element device
tensor) and a flip of ``turn``; the host reads the row after the event recorded on the step's stream behind
it.  Every pack flips ``turn`` on the device exactly as every copy flips the host's slot, so both name the same
row; a graph's warm-up runs (not captured) write no row.  A captured step is then kernels only, with no copy
or memset node, no copy stream and no event wait anywhere: the graph class that launches fastest.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["HOST_FIELDS", "HostMirror", "HostResult", "device_alias", "packed_size"]

HOST_FIELDS = ("accepted", "next_tokens", "next_last_token", "next_seq_lens")
I32 = torch.int32


def packed_size(rows: int, width: int) -> int:
    """Entries of a packed step of ``rows`` sequences: the host fields, then the flag."""
    return rows * (width + 3) + 1


def _unpack(flat: torch.Tensor, rows: int, batch: int, width: int) -> dict[str, torch.Tensor]:
    """The host fields of the first ``batch`` sequences of a step packed at ``rows`` rows per field."""
    out, at = {}, 0
    for n in HOST_FIELDS:
        size = rows * width if n == "next_tokens" else rows
        t = flat[at : at + size]
        out[n] = t.view(rows, width)[:batch] if n == "next_tokens" else t[:batch]
        at += size
    return out


def device_alias(host: torch.Tensor, device) -> torch.Tensor:
    """A tensor on ``device`` over the same bytes as the pinned host tensor ``host`` (kernels write what the host
    reads); on the CPU, ``host`` itself.  CUDA maps pinned memory at the same address on the device."""
    dev = torch.device(device)
    if dev.type == "cpu":
        return host
    if not host.is_pinned():
        raise ValueError("device_alias needs pinned host memory (pin=True)")

    class _Mapped:
        __cuda_array_interface__ = {
            "shape": tuple(host.shape),
            "typestr": host.numpy().__array_interface__["typestr"],
            "data": (host.data_ptr(), False),
            "strides": None,
            "version": 3,
        }

    out = torch.as_tensor(_Mapped(), device=dev)
    if out.data_ptr() != host.data_ptr() or out.shape != host.shape:
        raise RuntimeError("device_alias: the device view does not cover the host tensor")
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

    def __init__(
        self,
        api,
        device,
        max_batch: int,
        width: int,
        *,
        pin: bool = True,
        in_graph: bool | None = None,
        beside: bool = True,
        mapped: bool = False,
    ):
        self._api, self._device, self.width = api, device, int(width)
        self.mapped = bool(mapped)  # True: kernels write the host slots through their device address
        self.beside = bool(beside) and not self.mapped  # False: the copies run on the current stream, in its order
        self.copy_stream = api.new_stream(device) if self.beside else None
        n = packed_size(max_batch, width)
        # a captured step packs in its graph (CUDA: external events); ``copied`` is recorded once here so that
        # it exists before any capture waits on it (an event never recorded makes no wait node)
        self.in_graph = torch.device(device).type == "cuda" if in_graph is None else bool(in_graph)
        self._graph_staging = torch.zeros(n, dtype=I32, device=device) if self.in_graph else None
        self._copied = api.event(external=True) if self.in_graph and self.beside else None
        if self._copied is not None:
            self._copied.record(self.copy_stream)
        # two of each, so a step in flight never overwrites what the host reads
        self._staging = [torch.zeros(n, dtype=I32, device=device) for _ in range(2)]
        if self.mapped:
            ring = torch.zeros(2, n, dtype=I32, pin_memory=pin)
            self._ring = device_alias(ring, device)  # row ``turn`` takes the next pack
            self._turn_dev = torch.zeros(1, dtype=torch.int64, device=device)
            self._host = [ring[0], ring[1]]
        else:
            self._host = [torch.zeros(n, dtype=I32, pin_memory=pin) for _ in range(2)]
        # (slot, rows) -> the one-element view of that packing's flag: a poll reads it with ``item`` and no
        # indexing op (the host's step loop pays every microsecond where the device step is short)
        self._flag_views: dict[tuple[int, int], torch.Tensor] = {}
        self._no_flag = torch.zeros(1, dtype=I32, device=device)
        self._events = [api.event() for _ in range(2)]
        self._used = [False, False]  # whether a copy was ever made from each slot
        self._turn = 0
        self._steps: list[tuple[int, int, int]] = []  # (slot, rows, batch) of the latest two steps, newest last
        self._flag_copy = [0, 0]  # which copy (1, 2, ...) each slot's flag belongs to; 0: none
        self.copies = 0  # copies made so far
        self._graph_flagged = False  # whether the last pack_in_graph packed a flag

    def copy(self, result, batch: int, flag: torch.Tensor | None = None) -> None:
        """Pack ``result``'s host fields (and ``flag``) on the current stream, copy them to the host on the copy
        stream, then record that slot's event.

        ``result`` is a ``StepResult`` (or anything with the host fields); its
        fields may be views of persistent buffers with at least ``batch`` rows.
        ``flag`` (a device tensor of shape ``(1,)``) is packed along.
        """
        slot = self._next_slot()
        main = self._api.current_stream(self._device)
        if self._used[slot] and self.beside:
            main.wait_event(self._events[slot])  # the copy that last read this staging buffer
        n = packed_size(batch, self.width)
        torch.cat(self._packed([getattr(result, f) for f in HOST_FIELDS], batch, flag), out=self._staging[slot][:n])
        if self.mapped:
            self._write_ring(self._staging[slot], n)
        self._copy(self._staging[slot], slot, batch, batch, flag is not None)

    def _write_ring(self, staging: torch.Tensor, n: int) -> None:
        """``staging[:n]`` into ring row ``turn``, then flip ``turn`` (two kernels on the current stream)."""
        self._ring[:, :n].index_copy_(0, self._turn_dev, staging[:n].view(1, n))
        self._turn_dev.bitwise_xor_(1)

    def _packed(self, fields: list[torch.Tensor], rows: int, flag: torch.Tensor | None) -> list[torch.Tensor]:
        """The packed layout's pieces, in order: each host field's first ``rows`` rows flat, then the flag (a
        zero when none)."""
        packed_flag = self._no_flag if flag is None else flag if flag.shape == (1,) else flag.reshape(-1)[:1]
        return [t[:rows].reshape(-1) for t in fields] + [packed_flag]

    def _copy(self, staging: torch.Tensor, slot: int, rows: int, batch: int, flagged: bool) -> None:
        """``staging``'s packed step (``rows`` per field) to host slot ``slot`` on the copy stream, then its
        event (and ``copied`` for the graph staging)."""
        n = packed_size(rows, self.width)
        main = self._api.current_stream(self._device)
        if self.mapped:  # the pack's kernels wrote the host slot: its event only
            self._events[slot].record(main)
            self._done(slot, rows, batch, flagged)
            return
        copy = self.copy_stream if self.beside else main
        if self.beside:
            copy.wait_stream(main)
        with self._api.stream(copy):
            self._host[slot][:n].copy_(staging[:n], non_blocking=True)
            self._events[slot].record(copy)
            if self._copied is not None and staging is self._graph_staging:
                self._copied.record(copy)
        self._done(slot, rows, batch, flagged)

    def _done(self, slot: int, rows: int, batch: int, flagged: bool) -> None:
        self._used[slot] = True
        self._steps = (self._steps + [(slot, rows, batch)])[-2:]
        self.copies += 1
        self._flag_copy[slot] = self.copies if flagged else 0

    def wait_copied(self, stream) -> None:
        """Order ``stream``'s next work (captured: an event wait node) after the latest copy of the graph
        staging, which ``pack_in_graph`` overwrites.  Nothing with ``beside=False``: the stream's order does it."""
        if self._copied is not None:
            stream.wait_event(self._copied)

    def pack_in_graph(self, bufs, rows: int, flag: torch.Tensor | None = None, waited: bool = False) -> None:
        """Inside a step's sequence, as its last work: the host fields of ``bufs``' first ``rows`` rows (a
        bucket's; and ``flag``) into the graph staging, after the copy of the previous step packed there
        (``waited``: the sequence already ordered this stream after ``wait_copied``)."""
        main = self._api.current_stream(self._device)
        if not waited:
            self.wait_copied(main)
        fields = self._packed([bufs[f] for f in HOST_FIELDS], rows, flag)
        # one multi-tensor copy kernel into the staging's field views (a ``cat`` is a slower kernel)
        views, at = [], 0
        for t in fields:
            views.append(self._graph_staging[at : at + t.numel()])
            at += t.numel()
        torch._foreach_copy_(views, fields)
        if self.mapped and self._capturing():  # a warm-up run must not write a row the host may be reading
            self._write_ring(self._graph_staging, at)
        self._graph_flagged = flag is not None

    def _capturing(self) -> bool:
        query = getattr(self._api, "is_capturing", None)
        return True if query is None else bool(query(self._device))

    def copy_packed(self, rows: int, batch: int) -> None:
        """After a replay whose sequence ran ``pack_in_graph(bufs, rows, ...)``: its staging to the host (the
        first ``batch`` rows are the step's)."""
        self._copy(self._graph_staging, self._next_slot(), rows, batch, self._graph_flagged)

    def _next_slot(self) -> int:
        """The host slot (and eager staging buffer) of the next copy: the two alternate."""
        slot = self._turn
        self._turn ^= 1
        return slot

    def poll_flag(self, newer_than: int = 0) -> int:
        """The OR of the flags of complete copies made after copy number ``newer_than``; never blocks.

        A copy still in flight counts as 0; its flag is seen by a later poll
        (the device flag is sticky, so a later copy carries it too).
        """
        bits = 0
        for slot, rows, _ in self._steps:
            if self._flag_copy[slot] > newer_than and self._events[slot].query():
                view = self._flag_views.get((slot, rows))
                if view is None:
                    at = packed_size(rows, self.width) - 1
                    view = self._flag_views[slot, rows] = self._host[slot][at : at + 1]
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
        slot, rows, batch = self._steps[-1 - steps_back]
        self._events[slot].synchronize()
        return HostResult(**_unpack(self._host[slot], rows, batch, self.width))
