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

    def new_stream(self, device):
        return self.Stream(self, "copy")

    def current_stream(self, device):
        return self.current

    @contextlib.contextmanager
    def stream(self, s):
        self.log.append((s.name, "enter", None))
        yield
        self.log.append((s.name, "exit", None))

    def event(self):
        self.events += 1
        return self.Event(self, f"event{self.events - 1}")


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
