"""The Gated DeltaNet slot kernels compiled for sm_90 without a GPU (``benchmarks/triton_static.py``): what their
design promises holds in the machine code.

The chunked conv keeps a chunk's rows as channel vectors so that nothing reduces across threads: no shared memory,
no barrier, no spill. The delta rule runs one warp per value tile: its reductions over the key axis stay inside the
warp (no barrier in the row loop), and it holds the float32 state tile in registers with at most 8 bytes of spill
per thread (the 32-wide tile: the fastest on an H100 in spite of it; the 16-wide tile spills nothing).
"""

from __future__ import annotations

import pytest
from oracles.scripts import benchmark_module

pytest.importorskip("triton")
static = benchmark_module("triton_static")
CONFIGS = {name: (fn, sig, cx, warps) for name, fn, sig, cx, warps in static.gdn_configs()}


@pytest.mark.parametrize("name", ["conv_chunks bc32 rp8", "conv_chunks bc128 rp4", "conv_chunks bc128 rp1"])
def test_the_chunked_conv_needs_no_shared_memory_and_no_barrier(name):
    stats = static.static_stats(*CONFIGS[name])
    assert stats["shared_bytes"] == 0 and stats["barriers"] == 0, stats
    assert stats["spill_bytes"] == 0, stats


@pytest.mark.parametrize("name,spill", [("delta bv16", 0), ("delta bv32", 8)])
def test_the_delta_rule_keeps_its_state_tile_in_registers(name, spill):
    stats = static.static_stats(*CONFIGS[name])
    assert stats["spill_bytes"] <= spill, stats
    # one warp: a few barriers (scalar broadcasts), where four warps' reductions over the key axis add many
    four = static.static_stats(*CONFIGS[name][:3], num_warps=4)
    assert stats["barriers"] <= 4 < four["barriers"], (stats, four)


def test_unaligned_pointers_compile_to_per_element_addresses():
    """The check can fail: without the launcher's 16-byte alignment, the same kernel takes far more registers."""
    fn, sig, cx, warps = CONFIGS["delta bv16"]
    aligned = static.static_stats(fn, sig, cx, num_warps=warps)
    plain = static.static_stats(fn, sig, cx, num_warps=warps, aligned=False)
    assert plain["registers"] + plain["spill_bytes"] // 4 > aligned["registers"], (plain, aligned)


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


@pytest.mark.parametrize("name", ["wy_prepare", "wy_state bv16"])
def test_the_two_launch_chunked_form_compiles_without_spills(name):
    """The two launches of the chunked form (``triton_gdn_wy``) at their default 8 warps: the state pass keeps its
    chunk's operands and the state tile in registers; what the interpreter cannot check (a branch on a loaded slot
    inside a loop, ``tl.cumsum``, IEEE float32 dots) compiles for sm_90."""
    fn, sig, cx, warps = CONFIGS[name]
    stats = static.static_stats(fn, sig, cx, num_warps=warps)
    assert stats["spill_bytes"] == 0, stats
