"""The Gated DeltaNet slot kernels compiled for sm_90 without a GPU (``benchmarks/triton_static.py``): what their
design promises holds in the machine code.

The chunked conv keeps a chunk's rows as channel vectors so that nothing reduces across threads: no shared memory,
no barrier. No slot kernel spills registers at the tiles and chunks its launches take (a spill turns the float32
state tile's register traffic into local-memory traffic).
"""

from __future__ import annotations

import pytest
from oracles.scripts import benchmark_module

pytest.importorskip("triton")
static = benchmark_module("triton_static")
CONFIGS = {name: (fn, sig, cx) for name, fn, sig, cx in static.gdn_configs()}


@pytest.mark.parametrize("name", ["conv_chunks bc32 rp8", "conv_chunks bc128 rp4", "conv_chunks bc128 rp1"])
def test_the_chunked_conv_needs_no_shared_memory_and_no_barrier(name):
    stats = static.static_stats(*CONFIGS[name])
    assert stats["shared_bytes"] == 0 and stats["barriers"] == 0, stats
    assert stats["spill_bytes"] == 0, stats


@pytest.mark.parametrize("name", ["delta_chunks bv8 rp8", "delta_chunks bv16 rp4", "delta_rows bv32"])
def test_the_delta_rule_does_not_spill(name):
    stats = static.static_stats(*CONFIGS[name])
    assert stats["spill_bytes"] == 0, stats
    assert stats["registers"] <= 255, stats


def test_a_reduction_across_warps_shows_as_shared_memory_and_barriers():
    """The check can fail: a sum over a tile's channel axis, which spans the program's warps, goes through shared
    memory between barriers (as picking rows out of a [channels, rows] tile did in the form the chunked conv
    replaced)."""
    import triton
    import triton.language as tl

    @triton.jit
    def channel_sums(x, y, BC: tl.constexpr, RP: tl.constexpr):
        offs = tl.arange(0, BC)
        rr = tl.arange(0, RP)
        tile = tl.load(x + rr[None, :] * BC + offs[:, None])
        tl.store(y + rr, tl.sum(tile, axis=0))

    stats = static.static_stats(channel_sums, {"x": "*fp32", "y": "*fp32"}, {"BC": 128, "RP": 4})
    assert stats["barriers"] > 0 and stats["shared_bytes"] > 0, stats
