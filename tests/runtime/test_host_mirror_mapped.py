"""The host mirror's mapped mode: kernels write the host slots (a ring of two rows) through their device address,
row ``turn`` on the device, and the host reads the row its own turn names, with no copy, copy stream or event
wait; a graph's warm-up runs write no row."""

from __future__ import annotations

import pytest
import torch

from specgen.runtime.host_mirror import HostMirror, device_alias, packed_size

from .test_host_mirror import MAX_BATCH, FakeAPI, W, bucket_bufs, result


class CapturingAPI(FakeAPI):
    """``FakeAPI`` whose stream is capturing only while ``capturing`` is set (a warm-up run is not)."""

    def __init__(self):
        super().__init__()
        self.capturing = False

    def is_capturing(self, device):
        return self.capturing


def mapped(api=None):
    api = api or CapturingAPI()
    return HostMirror(api, "cpu", MAX_BATCH, W, pin=False, in_graph=True, mapped=True), api


def test_eager_copies_write_the_ring_row_the_host_reads():
    """Each copy writes ring row ``turn`` and flips it; the host's slot follows: no copy stream, no event wait,
    only the slot's event recorded on the step's stream."""
    m, api = mapped()
    assert m.copy_stream is None and not m.beside and api.events == 2
    for k, batch in [(1, 2), (2, 4), (3, 1)]:
        turn = int(m._turn_dev)
        m.copy(result(k, batch), batch)
        n = packed_size(batch, W)
        assert m._ring[turn, :n].tolist() == [k] * (n - 1) + [0]  # the fields, then a zero flag
        assert int(m._turn_dev) == 1 - turn
    assert [e for e in api.log if e[1] in ("wait_event", "wait_stream", "enter")] == []
    assert [e for e in api.log if e[1] == "record"] == [("main", "record", f"event{i % 2}") for i in range(3)]
    assert m.result(0).accepted.tolist() == [3] and m.result(1).next_tokens.tolist() == [[2] * W] * 4


def test_warm_up_packs_write_no_row_and_a_capture_does():
    """A pack outside a capture (the graph's warm-up) leaves both rows and ``turn`` alone, so a result the host
    has not read survives the capture; the captured pack writes the row the next copy names."""
    m, api = mapped()
    m.copy(result(5, 2), 2)
    m.copy(result(6, 3), 3)
    before = m._ring.clone()
    for _ in range(3):  # warm-up runs
        m.pack_in_graph(bucket_bufs(40, 4), 4, flag=torch.tensor([1], dtype=torch.int32))
    assert torch.equal(m._ring, before) and int(m._turn_dev) == 0
    assert m.result(0).accepted.tolist() == [6] * 3 and m.result(1).accepted.tolist() == [5] * 2
    api.capturing = True  # here the fake runs the captured work at once: a replay
    m.pack_in_graph(bucket_bufs(50, 4), 4, flag=torch.tensor([1], dtype=torch.int32))
    m.copy_packed(4, 3)
    latest = m.result(0)
    assert latest.accepted.tolist() == [50, 51, 52] and m.result(1).accepted.tolist() == [6] * 3
    m._events[0].query = lambda: True
    assert m.poll_flag(0) == 1


def test_graph_and_eager_copies_stay_on_the_same_row():
    """Replays and eager steps mixed: the device's ``turn`` and the host's slot never part."""
    m, api = mapped()
    api.capturing = True
    for k in range(6):
        if k % 3 == 2:
            m.copy(result(100 + k, 2), 2)
        else:
            m.pack_in_graph(bucket_bufs(10 * k, 4), 4)
            m.copy_packed(4, 4)
        assert int(m._turn_dev) == m._turn
    assert m.result(0).accepted.tolist() == [105] * 2 and m.result(1).accepted.tolist() == [40, 41, 42, 43]


def test_device_alias_is_the_host_tensor_on_the_cpu_and_needs_pinned_memory():
    host = torch.zeros(2, 5, dtype=torch.int32)
    assert device_alias(host, "cpu") is host
    with pytest.raises(ValueError, match="pinned"):
        device_alias(host, "cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_mapped_ring_in_a_graph():
    """On CUDA: the captured pack is kernels only (no memcpy node), and each replay's fields reach pinned host
    memory in the row the host reads, alternating, with no copy."""
    from specgen.runtime.device import DeviceAPI

    api = DeviceAPI("cuda")
    dev = torch.device("cuda")
    m = HostMirror(api, dev, MAX_BATCH, W, in_graph=True, mapped=True)
    assert m._ring.device.type == "cuda" and m._ring.data_ptr() == m._host[0].data_ptr()
    bufs = {k: v.to(dev) for k, v in bucket_bufs(0, 4).items()}
    g = api.capture(lambda: m.pack_in_graph(bufs, 4), dev, api.pool_handle())
    for k in range(5):
        for v in bufs.values():
            v.fill_(k)
        g.replay()
        m.copy_packed(4, 4)
        assert m.result(0).accepted.tolist() == [k] * 4
        if k:
            assert m.result(1).accepted.tolist() == [k - 1] * 4
