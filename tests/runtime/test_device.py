"""Per-bucket graphs: one pool for all, each bucket captured once through DeviceAPI.capture."""

from __future__ import annotations

from specgen.runtime.device import BucketGraphs


class FakeGraph:
    def __init__(self, fn):
        self.fn, self.replays = fn, 0

    def replay(self):
        self.replays += 1
        self.fn()


class FakeAPI:
    def __init__(self):
        self.pools, self.captures = 0, []

    def pool_handle(self):
        self.pools += 1
        return f"pool{self.pools}"

    def capture(self, fn, device, pool, warmup=2):
        self.captures.append((device, pool, warmup))
        return FakeGraph(fn)


def test_buckets_share_one_pool_and_replay_their_graph():
    api, ran = FakeAPI(), []
    graphs = BucketGraphs(api, "cuda:0", warmup=3)
    assert 4 not in graphs
    graphs.capture(4, lambda: ran.append(4))
    graphs.capture(8, lambda: ran.append(8))
    assert 4 in graphs and 8 in graphs and 2 not in graphs
    assert api.pools == 1 and api.captures == [("cuda:0", "pool1", 3)] * 2
    graphs.replay(8)
    graphs.replay(4)
    assert ran == [8, 4]
