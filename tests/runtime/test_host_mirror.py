"""The host mirror: double-buffered host copies, the order of their events, one-step-late reads."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch

from specgen.runtime.host_mirror import HOST_FIELDS, HostMirror, HostResult

W, MAX_BATCH = 3, 4
I32 = torch.int32


class FakeAPI:
    """A DeviceAPI stand-in on the CPU that logs what the mirror asks of streams and events."""

    def __init__(self):
        self.log = []
        self.current = self.Stream(self, "main")
        self.events = 0

    class Stream:
        def __init__(self, api, name):
            self.api, self.name = api, name

        def wait_stream(self, other):
            self.api.log.append((self.name, "wait_stream", other.name))

        def wait_event(self, event):
            self.api.log.append((self.name, "wait_event", event.name))

    class Event:
        def __init__(self, api, name):
            self.api, self.name = api, name

        def record(self, stream):
            self.api.log.append((stream.name, "record", self.name))

        def synchronize(self):
            self.api.log.append(("host", "synchronize", self.name))

        def query(self):
            return False

    def new_stream(self, device):
        return self.Stream(self, "copy")

    def current_stream(self, device):
        return self.current

    @contextlib.contextmanager
    def stream(self, s):
        self.log.append((s.name, "enter", None))
        yield
        self.log.append((s.name, "exit", None))

    def event(self, external=False):
        self.events += 1
        return self.Event(self, f"{'external' if external else 'event'}{self.events - 1}")


def result(k, batch, fast_path=True):
    """A step result whose host fields hold ``k`` (so each step is recognisable)."""
    fields = {n: torch.full((batch, W) if n == "next_tokens" else (batch,), k, dtype=I32) for n in HOST_FIELDS}
    return SimpleNamespace(**fields, fast_path=fast_path)


@pytest.fixture
def mirror():
    api = FakeAPI()
    return HostMirror(api, "cpu", MAX_BATCH, W, pin=False), api


def test_results_alternate_between_two_slots(mirror):
    m, api = mirror
    assert m.result(0) is None and m.result(1) is None
    m.wait_latest()  # nothing copied yet: nothing to wait for
    assert api.log == []
    m.copy(result(1, 2), 2)
    assert m.result(1) is None
    m.copy(result(2, 4), 4)
    m.copy(result(3, 1), 1)  # the third step reuses the first slot
    latest, previous = m.result(0), m.result(1)
    assert isinstance(latest, HostResult)
    assert latest.accepted.tolist() == [3] and latest.next_tokens.tolist() == [[3] * W]
    assert previous.accepted.tolist() == [2] * 4 and previous.next_seq_lens.shape == (4,)
    syncs = [e for e in api.log if e[1] == "synchronize"]
    assert syncs == [("host", "synchronize", "event0"), ("host", "synchronize", "event1")]
    with pytest.raises(ValueError, match="steps_back"):
        m.result(2)


def test_copy_orders_after_the_step_and_records_its_event(mirror):
    m, api = mirror
    m.copy(result(1, 2), 2)
    assert api.log == [
        ("copy", "wait_stream", "main"),
        ("copy", "enter", None),
        ("copy", "record", "event0"),
        ("copy", "exit", None),
    ]
    api.log.clear()
    m.copy(result(2, 2), 2)
    m.wait_latest()  # the next writes wait for the newest copy (slot 1), on the device
    assert api.log[-1] == ("main", "wait_event", "event1")
    assert not any(e[1] == "synchronize" for e in api.log)  # no host synchronization on the way


def test_a_staging_buffer_is_reused_only_after_its_copy(mirror):
    """The pack reads the fields on the step's stream; the copy reads only the staging buffer.  The third
    step packs into the first step's staging buffer after waiting, on the device, for that step's copy."""
    m, api = mirror
    m.copy(result(1, 2), 2)
    m.copy(result(2, 3), 3)
    assert not any(e[1] == "wait_event" for e in api.log)  # fresh buffers: nothing to wait for
    api.log.clear()
    m.copy(result(5, 3, fast_path=False), 3)
    assert api.log[0] == ("main", "wait_event", "event0") and api.log[1] == ("copy", "wait_stream", "main")
    assert m.result(0).next_last_token.tolist() == [5] * 3 and m.result(1).accepted.tolist() == [2] * 3


def test_the_flag_travels_in_the_packed_copy(mirror):
    m, _ = mirror
    m.copy(result(1, 2), 2, flag=torch.tensor([6], dtype=I32))
    m.copy(result(2, 4), 4)
    host = m._host[0]
    assert host[: 2 * (W + 3) + 1].tolist() == [1] * (2 * (W + 3)) + [6]
    assert m.copies == 2 and m._flag_copy == [1, 0]


def test_the_step_before_stays_readable_while_the_next_is_copied(mirror):
    """The engine's order: copy step i, then read step i - 1 (``steps_back=1``) before consuming step i."""
    m, _ = mirror
    for k in range(1, 6):
        m.copy(result(k, MAX_BATCH), MAX_BATCH)  # same batch every step: only the slot tells steps apart
        latest = m.result(0)
        assert latest.accepted.tolist() == [k] * MAX_BATCH and latest.next_tokens.tolist() == [[k] * W] * MAX_BATCH
        if k > 1:
            previous = m.result(1)
            assert previous.accepted.tolist() == [k - 1] * MAX_BATCH
            assert previous.next_last_token.tolist() == [k - 1] * MAX_BATCH
            assert previous.next_seq_lens.data_ptr() != latest.next_seq_lens.data_ptr()


def bucket_bufs(k, rows):
    """A bucket's step buffers (``rows`` rows) whose host fields hold ``k`` in row ``i`` as ``k + i``."""
    col = torch.arange(rows, dtype=I32) + k
    return {n: (col[:, None].expand(rows, W).contiguous() if n == "next_tokens" else col.clone()) for n in HOST_FIELDS}


def test_a_graph_packs_its_bucket_and_the_copy_follows_the_replay():
    """``in_graph``: the step's sequence packs its bucket's rows (waiting first for the last copy of the graph
    staging, unless its side stream did); after the replay the copy reads that staging, records the slot's event
    and ``copied``; the host reads the step's first ``batch`` rows and the flag at the bucket's layout."""
    api = FakeAPI()
    m = HostMirror(api, "cpu", MAX_BATCH, W, pin=False, in_graph=True)
    assert api.log == [("copy", "record", "external0")]  # made before any capture waits on it
    api.log.clear()
    m.pack_in_graph(bucket_bufs(10, 4), 4, flag=torch.tensor([0], dtype=I32))
    assert api.log == [("main", "wait_event", "external0")]
    api.log.clear()
    m.copy_packed(4, 2)
    assert api.log == [
        ("copy", "wait_stream", "main"),
        ("copy", "enter", None),
        ("copy", "record", "event1"),
        ("copy", "record", "external0"),
        ("copy", "exit", None),
    ]
    got = m.result(0)
    assert got.accepted.tolist() == [10, 11] and got.next_tokens.tolist() == [[10] * W, [11] * W]
    assert got.next_seq_lens.tolist() == [10, 11]
    api.log.clear()
    m.pack_in_graph(bucket_bufs(20, 4), 4, flag=torch.tensor([4], dtype=I32), waited=True)
    assert api.log == []  # the side stream waited earlier in the step
    m.copy_packed(4, 3)
    assert m.poll_flag(0) == 0  # the fake's events never complete: nothing read yet
    m._events[1].query = lambda: True
    assert m.poll_flag(0) == 4  # the flag sits after the bucket's four rows, not the batch's three
    assert m.result(0).next_last_token.tolist() == [20, 21, 22] and m.result(1).accepted.tolist() == [10, 11]


def test_graph_packed_and_eager_copies_mix():
    """An eager step (a fallback) between replays packs its batch into its own staging; both stay readable."""
    api = FakeAPI()
    m = HostMirror(api, "cpu", MAX_BATCH, W, pin=False, in_graph=True)
    m.pack_in_graph(bucket_bufs(1, 4), 4)
    m.copy_packed(4, 4)
    m.copy(result(7, 2, fast_path=False), 2)
    assert m.result(0).accepted.tolist() == [7, 7] and m.result(1).accepted.tolist() == [1, 2, 3, 4]
    m.pack_in_graph(bucket_bufs(30, 4), 4)
    m.copy_packed(4, 1)
    assert m.result(0).next_tokens.tolist() == [[30] * W] and m.result(1).next_seq_lens.tolist() == [7, 7]


def test_copies_on_the_steps_stream_need_no_event_wait():
    """``beside=False`` (a runtime without side streams): no copy stream and no external event; the pack waits for
    nothing (the stream's order puts the last copy first) and the copy, its event included, runs on the current
    stream; the host still reads each step's rows and its flag, and an eager copy packs without a wait."""
    api = FakeAPI()
    m = HostMirror(api, "cpu", MAX_BATCH, W, pin=False, in_graph=True, beside=False)
    assert m.copy_stream is None and api.log == [] and api.events == 2  # the two slots' events, nothing external
    m.pack_in_graph(bucket_bufs(10, 4), 4, flag=torch.tensor([2], dtype=I32))
    m.wait_copied(api.current)
    assert api.log == []
    m.copy_packed(4, 2)
    assert api.log == [("main", "enter", None), ("main", "record", "event0"), ("main", "exit", None)]
    api.log.clear()
    m.copy(result(5, 3, fast_path=False), 3)
    m.copy(result(6, 1, fast_path=False), 1)  # slot 0 again: its event is on the same stream, no wait
    assert [e for e in api.log if e[1] in ("wait_event", "wait_stream")] == []
    assert m.result(0).accepted.tolist() == [6] and m.result(1).next_tokens.tolist() == [[5] * W] * 3
    m._events[1].query = lambda: True
    m._events[0].query = lambda: True
    assert m.poll_flag(0) == 0  # eager copies without a flag pack a zero
