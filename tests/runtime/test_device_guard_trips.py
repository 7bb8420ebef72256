"""The device guard end to end: a bad value written between two steps trips the next step, the flag is read from
completed copies only (a lagged read), and on CUDA a trip needs no host sync."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import torch
from oracles.graph_dot import debug_graph, is_chain, read_dot
from oracles.guarded_step import BS, BT, CAPS, FIELDS, I32, VOCAB, W, expected, fill, model_forward

from specgen.runtime.device_guard import (
    ACCEPTED_RANGE,
    BLOCK_ENTRY,
)
from specgen.runtime.host_mirror import HostMirror
from specgen.runtime.verify_graph import SpecVerifyRuntime

# --------------------------------------------------------------- trips on the CPU
BAD = {  # a bad value written into the persistent buffers between two steps, and the condition it breaks
    "negative_seq_len": (lambda b: b["seq_lens"].__setitem__(1, -5), "min_seq_len >= 0"),
    "end_of_table": (lambda b: b["seq_lens"].__setitem__(0, BT * BS - 2), None),
    "unallocated_block": (lambda b: b["block_table"].__setitem__((2, int(b["seq_lens"][2]) // BS), -1), BLOCK_ENTRY),
    "entry_past_int32": (
        lambda b: b["block_table"].__setitem__((0, int(b["seq_lens"][0]) // BS), 2**31 // BS),
        BLOCK_ENTRY,
    ),
    "accepted_out_of_range": (lambda b: b["accepted"].__setitem__(2, W + 3), ACCEPTED_RANGE),
}


@pytest.mark.parametrize("bad", sorted(BAD))
def test_bad_value_between_steps_trips_the_next_step(engine_kernels, bad):
    gen = torch.Generator().manual_seed(5)
    rt = SpecVerifyRuntime(engine_kernels, model_forward, CAPS, W, max_batch=4)
    bufs, batch = rt.buffers(3), 3
    bounds = (0, 60)  # what the host believes; the bad value is written behind its back
    for _ in range(3):
        fill(bufs, batch, gen)
        assert rt.step_in_place(batch, bounds).fast_path
    assert rt.stats()["fallback"] == {} and rt.stats()["device_guard"] == {}
    write, condition = BAD[bad]
    write(bufs)
    first = rt.step_in_place(batch, bounds)  # replays with the bad value: the host guards saw nothing
    assert first.fast_path
    fill(bufs, batch, gen)
    want = expected(bufs, batch)
    second = rt.step_in_place(batch, bounds)  # the flag of the step before sends this one to the eager path
    assert not second.fast_path and second.reason == "device_guard_trip"
    for n in FIELDS:
        assert torch.equal(getattr(second, n), want[n]), n
    stats = rt.stats()
    assert stats["fallback"] == {"device_guard_trip": 1}
    if condition is None:  # past the table: the guards on max_seq_len fail
        assert stats["device_guard"] and all(n.startswith("max_seq_len") for n in stats["device_guard"])
    else:
        assert stats["device_guard"] == {condition: 1}
    for _ in range(2):  # cleared: clean inputs run fast again, and the eager step left the guard's bounds alone
        fill(bufs, batch, gen)
        assert rt.step_in_place(batch, bounds).fast_path
    assert rt.stats()["fallback"] == {"device_guard_trip": 1}
    if rt._guard.uses_kernel(rt._bucket(batch)):
        assert bufs["guard_params"].tolist() == rt._guard.spec.kernel_params(rt._bucket(batch))


def test_step_with_a_bad_table_trips_the_next_step(engine_kernels):
    """``step`` copies the inputs in: an engine's -1 entry (which no host guard reads) is caught all the same."""
    gen = torch.Generator().manual_seed(9)
    rt = SpecVerifyRuntime(engine_kernels, model_forward, CAPS, W, max_batch=4)
    last = torch.randint(0, VOCAB, (2,), generator=gen, dtype=I32)
    drafts = torch.randint(0, VOCAB, (2, W - 1), generator=gen, dtype=I32)
    seq_lens = torch.tensor([20, 40], dtype=I32)
    table = torch.randint(1, 64, (2, BT), generator=gen, dtype=I32)
    bad = table.clone()
    bad[1, 40 // BS] = -1
    assert rt.step(last, drafts, seq_lens, bad).fast_path
    res = rt.step(last, drafts, seq_lens, table)
    assert res.reason == "device_guard_trip"
    assert rt.stats()["device_guard"] == {BLOCK_ENTRY: 1}
    assert rt.step(last, drafts, seq_lens, table).fast_path


def test_without_the_device_guard_a_bad_value_is_not_caught(engine_kernels):
    """``device_guard=False`` (``specgen bench --no-device-guard``): the same steps and results, no device checks,
    so the bad value that trips the guarded runtime goes unseen (the host guards stay)."""
    gen = torch.Generator().manual_seed(5)
    on = SpecVerifyRuntime(engine_kernels, model_forward, CAPS, W, max_batch=4)
    off = SpecVerifyRuntime(engine_kernels, model_forward, CAPS, W, max_batch=4, device_guard=False)
    assert on._guard is not None and off._guard is None
    batch, bounds = 3, (0, 60)
    for _ in range(2):
        vals = fill(on.buffers(batch), batch, gen)
        for n, t in vals.items():
            off.buffers(batch)[n][:batch].copy_(t)
        a, b = on.step_in_place(batch, bounds), off.step_in_place(batch, bounds)
        assert a.fast_path and b.fast_path
        for n in FIELDS:
            assert torch.equal(getattr(a, n), getattr(b, n)), n
    for rt in (on, off):
        BAD["accepted_out_of_range"][0](rt.buffers(batch))
        rt.step_in_place(batch, bounds)
    assert not on.step_in_place(batch, bounds).fast_path  # the guarded one trips
    assert off.step_in_place(batch, bounds).fast_path and off.stats()["device_guard"] == {}
    assert off.stats()["fallback"] == {}


# ------------------------------------------- the lagged read: host copies and their events
class LaggedAPI:
    """A CPU stand-in for a device API whose copy events complete only when the test says so."""

    class Stream:
        def wait_stream(self, other):
            pass

        def wait_event(self, event):
            pass

    class Event:
        def __init__(self, api):
            self.api, self.done = api, True

        def record(self, stream):
            self.done = False
            self.api.pending.append(self)

        def query(self):
            self.api.queries += 1
            return self.done

        def synchronize(self):
            raise AssertionError("the device guard must never wait on a copy")

    def __init__(self):
        self.pending, self.queries, self.main = [], 0, self.Stream()

    def complete(self):
        for e in self.pending:
            e.done = True
        self.pending.clear()

    def new_stream(self, device):
        return self.Stream()

    def current_stream(self, device):
        return self.main

    def stream(self, s):
        import contextlib

        return contextlib.nullcontext()

    def event(self):
        return self.Event(self)


class CPUMirror(HostMirror):
    """The host mirror over ``LaggedAPI``; CPU tensors have no stream to record, so none is recorded."""

    def copy(self, result, batch, flag=None):
        super().copy(dataclasses.replace(result, fast_path=True), batch, flag)


def test_flag_is_read_from_completed_copies_only(engine_kernels):
    """With host copies in flight the runtime keeps replaying; once a copy shows the flag, one step runs eager."""
    gen = torch.Generator().manual_seed(2)
    rt = SpecVerifyRuntime(engine_kernels, model_forward, CAPS, W, max_batch=4)
    api = LaggedAPI()
    rt._mirror = CPUMirror(api, torch.device("cpu"), 4, W, pin=False)  # the device path's lagged read, on the CPU
    bufs, batch, bounds = rt.buffers(4), 4, (0, 60)
    fill(bufs, batch, gen)
    rt.step_in_place(batch, bounds)
    api.complete()
    bufs["block_table"][0].fill_(-1)
    assert rt.step_in_place(batch, bounds).fast_path  # flags; its copy is in flight
    fill(bufs, batch, gen)
    assert rt.step_in_place(batch, bounds).fast_path  # the copy with the flag has not completed
    assert api.queries > 0
    api.complete()
    res = rt.step_in_place(batch, bounds)
    assert res.reason == "device_guard_trip"
    api.complete()  # the copies made before the flag was cleared still show it: they are stale
    assert rt._mirror.poll_flag(0) != 0
    assert rt.step_in_place(batch, bounds).fast_path
    assert rt.stats()["fallback"] == {"device_guard_trip": 1} and rt.stats()["device_guard"] == {BLOCK_ENTRY: 1}


# ----------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize(
    "prologue, side_streams",
    [(False, True), (True, True), (False, False), (True, False)],
    ids=["plain", "beside-the-draft", "one-stream", "one-stream-draft"],
)
def test_cuda_device_guard_trip_without_host_sync(prologue, side_streams, tmp_path):
    """On the GPU: clean replays never trip; a bad value written between replays trips the step after the
    host's lagged read of it; no step synchronizes the host and no clean replay allocates.  With a prologue
    (a stand-in draft that writes only the drafts), the checks run on the side stream beside it.  Without side
    streams (``side_streams=False``) the captured step is one chain of nodes with no event wait node (its debug
    dump, read with networkx), where the side streams' graph is not; the trips are the same.

    Kernels: SPECGEN_TEST_CUDA_KERNELS (specgen build --target cuda --widths 4 --block-table-widths 8
    --block-sizes 16 --out ...), or the engine kernels in SPECGEN_TEST_ENGINE_KERNELS.
    """
    from specgen.runtime.library import load_library

    folder = os.environ.get("SPECGEN_TEST_CUDA_KERNELS") or os.environ.get("SPECGEN_TEST_ENGINE_KERNELS")
    if not folder:
        pytest.skip("set SPECGEN_TEST_CUDA_KERNELS to a prebuilt cuda build (w4, bt8, bs16)")
    from specgen.runtime.verify_graph import Prologue

    dev = torch.device("cuda")
    held = {}
    draft = Prologue(lambda: held["bufs"]["draft_tokens"].add_(0), writes=("draft_tokens",)) if prologue else None
    rt = SpecVerifyRuntime(
        load_library(folder),
        model_forward,
        CAPS,
        W,
        max_batch=8,
        backend="cuda",
        device=dev,
        prologue=draft,
        side_streams=side_streams,
    )
    held["bufs"] = rt.buffers(6)
    assert bool(rt.hoisted) == prologue  # the head work, and with it the checks, beside the draft
    rt._api.Graph = debug_graph
    rt.capture_all()
    dot = tmp_path / "step.dot"
    rt._graphs._graphs[8].debug_dump(str(dot))
    shape = read_dot(dot.read_text())
    if os.environ.get("SPECGEN_GRAPH_DUMPS"):  # the dump itself, for a look at the graph
        (Path(os.environ["SPECGEN_GRAPH_DUMPS"]) / f"guard_{prologue}_{side_streams}.dot").write_bytes(dot.read_bytes())
    kinds = [k for _, k in shape.nodes(data="kind")]
    assert kinds.count("KERNEL") >= 3, kinds  # the head, the checks and the tail at least
    assert is_chain(shape) == (not side_streams), kinds
    assert ("EVENT_WAIT" in kinds) == side_streams, kinds  # the host mirror's wait for its last copy
    gen = torch.Generator().manual_seed(3)
    bufs, batch, bounds = rt.buffers(6), 6, (0, 60)

    def step(mode="error"):  # the eager step after a trip is only warned about: the fast path is what must not sync
        torch.cuda.set_sync_debug_mode(mode)
        try:
            return rt.step_in_place(batch, bounds)
        finally:
            torch.cuda.set_sync_debug_mode(0)

    fill(bufs, batch, gen)
    step()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    for _ in range(20):
        fill(bufs, batch, gen)
        assert step().fast_path
        rt.host_result(1)  # the engine's one-step-late read
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == before
    assert rt.stats()["fallback"] == {} and rt.stats()["device_guard"] == {}
    for name, (write, condition) in sorted(BAD.items()):
        fill(bufs, batch, gen)
        write(bufs)
        assert step().fast_path
        rt.host_result(0)  # the host reads this step's copy (it waits on its event, as a lagged engine does)
        fill(bufs, batch, gen)
        want = expected(bufs, batch)
        res = step("warn")
        assert res.reason == "device_guard_trip", name
        for n in FIELDS:
            assert torch.equal(getattr(res, n).cpu(), want[n]), (name, n)
        assert condition is None or condition in rt.stats()["device_guard"], name
        fill(bufs, batch, gen)
        assert step().fast_path, name
        rt.host_result(0)
    assert rt.stats()["fallback"] == {"device_guard_trip": len(BAD)}
    print("device guard trips on cuda:", rt.stats())


def test_a_captured_step_issues_the_head_before_the_guard_s_checks(engine_kernels):
    """The order a guarded step is captured in (a replay starts independent branches in that order): the checks'
    stream waits at the step's start, the head comes first, then the checks, the host mirror's wait for its last
    copy on the checks' stream, the forward, the join, the tail; the pack then needs no wait of its own."""
    rt = SpecVerifyRuntime(engine_kernels, model_forward, CAPS, W, max_batch=4)
    bufs = rt.buffers(4)
    fill(bufs, 4, torch.Generator().manual_seed(3))
    log = []

    class Guard:
        flag, stream = torch.zeros(1, dtype=I32), "guard-stream"
        mark = lambda self: log.append("mark")  # noqa: E731
        fork = lambda self, bufs, bucket: log.append("checks")  # noqa: E731
        join = lambda self: log.append("join")  # noqa: E731

    class Mirror:
        in_graph = True
        wait_copied = lambda self, stream: log.append(f"wait_copied on {stream}")  # noqa: E731
        pack_in_graph = lambda self, bufs, rows, flag, waited: log.append(f"pack waited={waited}")  # noqa: E731

    call, forward = rt._call_kernel, rt.model_forward
    rt._call_kernel = lambda step, args: (log.append(step.variant.family), call(step, args))[1]
    rt.model_forward = lambda b: (log.append("forward"), forward(b))[1]
    rt._guard, rt._mirror = Guard(), Mirror()
    rt._sequence(4)()
    head = [s.variant.family for s in rt.sequence[: rt._leading_head()]]
    assert head and log[: len(head) + 3] == ["mark", *head, "checks", "wait_copied on guard-stream"]
    tail = [s.variant.family for s in rt.sequence[rt._leading_head() + 1 :]]
    assert tail and log[log.index("forward") :] == ["forward", "join", *tail, "join", "pack waited=True"]
    rt.sequence = (rt.sequence[-1], *rt.sequence)  # a first step that writes `accepted` keeps the checks ahead
    assert rt._leading_head() == 0
