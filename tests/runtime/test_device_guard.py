"""The verify graph's device-side guard: the host's guard rules on the device, a sticky flag, a lagged read."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles.guarded_step import BS, BT, CAPS, I32, W, model_forward

from specgen.runtime.device_guard import (
    ACCEPTED_RANGE,
    BLOCK_ENTRY,
    SCRATCH_ENTRY,
    DeviceGuard,
    DeviceGuardSpec,
    device_eval,
    kernel_guards,
    row_bounds,
)
from specgen.runtime.verify_graph import SpecVerifyRuntime
from specgen.specializations.expr import safe_eval
from specgen.specializations.families import FAMILIES
from specgen.specializations.guard_check import GUARD_CHECK


# ------------------------------------------------------------------ the conditions
@settings(max_examples=300, deadline=None)
@given(
    lo=st.integers(-(2**31), 2**31 - 1),
    hi=st.integers(-(2**31), 2**31 - 1),
    batch=st.integers(0, 1024),
    extra=st.sampled_from(
        [
            "max_seq_len - min_seq_len <= 7 and not batch > 600",
            "0 <= min_seq_len <= max_seq_len < 100 or batch == 3",
            "-max_seq_len // 16 >= -4",
        ]
    ),
)
def test_device_evaluation_agrees_with_the_host(engine_kernels, lo, hi, batch, extra):
    """Every guard expression the host evaluates gives the same verdict on tensors (no drift)."""
    exprs = {g for e in engine_kernels.entries() for g, _ in e.guards}
    env = {"min_seq_len": lo, "max_seq_len": hi, "batch": batch}
    tensors = {
        "min_seq_len": torch.tensor(lo, dtype=torch.long),
        "max_seq_len": torch.tensor(hi, dtype=torch.long),
        "batch": batch,
    }
    for expr in sorted(exprs) + [extra]:
        assert bool(device_eval(expr, tensors)) == bool(safe_eval(expr, env)), expr


def test_spec_comes_from_the_plan(engine_kernels):
    rt = SpecVerifyRuntime(engine_kernels, model_forward, CAPS, W, max_batch=4)
    spec = rt._guard.spec
    host = {g for k in rt.step_plan.kernels.values() for g in kernel_guards(k)}
    assert set(spec.guards) == {g for g in host if "seq_len" in g} and spec.guards
    assert "min_seq_len >= 0" in spec.guards
    assert spec.reach == W + 1  # prepare_next_draft maps S .. S + W (its rule: S + W + 1 <= BT * BS)
    assert spec.names[-3:] == (BLOCK_ENTRY, ACCEPTED_RANGE, SCRATCH_ENTRY)
    torch_rt = SpecVerifyRuntime(engine_kernels, model_forward, CAPS, W, max_batch=4, kernels="torch")
    assert torch_rt._guard.spec.guards == () and torch_rt._guard.spec.reach == W + 1
    # the build made the guard's kernel beside the head: every bucket is checked by one launch
    assert all(rt._guard.uses_kernel(b) for b in rt.buckets)
    assert not any(torch_rt._guard.uses_kernel(b) for b in torch_rt.buckets)


# ------------------------------------------------------------ the row bounds of a guard
def _registry_guards() -> list[str]:
    """Every family's guard rules at a few layouts, as the manifest writes them (the layout substituted)."""
    from specgen.codegen.guards import guards
    from specgen.specializations.variants import Layout, VariantSpec

    out = set()
    for w, bt, bs in ((4, 64, 128), (6, 3, 5), (16, 8, 16)):
        for f in FAMILIES:
            out |= {g.expr for g in guards(VariantSpec.of(f, Layout(w, bt, bs)))}
    return sorted(out)


REGISTRY_GUARDS = _registry_guards()


@settings(max_examples=400, deadline=None)
@given(
    expr=st.sampled_from(REGISTRY_GUARDS + ["max_seq_len // 7 - 3 < 1000", "-min_seq_len <= 5", "batch > 2"]),
    batch=st.sampled_from([1, 2, 3, 8, 256, 2**20]),
    lens=st.lists(
        st.one_of(st.integers(-(2**31), 2**31 - 1), st.integers(-300, 9000), st.sampled_from([2**31 - 1, 268435324])),
        min_size=1,
        max_size=6,
    ),
)
def test_row_bounds_decide_a_guard_row_by_row(expr, batch, lens):
    """Where ``row_bounds`` gives bounds, the guard holds over a batch's minimum and maximum exactly when
    every row's length lies within them: what the kernel checks one sequence at a time."""
    bounds = row_bounds(expr, batch)
    assert bounds is not None, expr  # every rule the families have decomposes
    lo, hi = bounds
    env = {"min_seq_len": min(lens), "max_seq_len": max(lens), "batch": batch}
    assert bool(safe_eval(expr, env)) == all(lo <= s <= hi for s in lens), (expr, bounds)


@pytest.mark.parametrize(
    "expr", ["max_seq_len - min_seq_len <= 7", "max_seq_len >= 3", "min_seq_len * min_seq_len <= 100"]
)
def test_row_bounds_refuse_what_is_no_half_line(expr):
    """Both lengths, or a condition that does not close downwards in the maximum (upwards in the minimum):
    no per-row bounds (the guard keeps its tensor ops)."""
    assert row_bounds(expr, 4) is None
    spec = DeviceGuardSpec(W, BT, BS, ("min_seq_len >= 0", expr), W + 1)
    assert spec.kernel_params(4) is None


def test_row_bounds_of_a_batch_dependent_rule():
    rule = "batch * 4 * ((max_seq_len + 4 + 127) // 128) <= 2147483647"
    assert row_bounds(rule, 1) == (-(2**31), 2**31 - 1)  # every int32 length fits at B = 1
    lo, hi = row_bounds(rule, 256)
    assert lo == -(2**31) and safe_eval(rule, {"max_seq_len": hi, "batch": 256, "min_seq_len": 0})
    assert not safe_eval(rule, {"max_seq_len": hi + 1, "batch": 256, "min_seq_len": 0})
    assert row_bounds("batch >= 1", 0) == (1, 0)  # holds for no row: every row fails it


# ------------------------------------------------ the generated check against the tensor ops
@settings(max_examples=60, deadline=None)
@given(
    batch=st.sampled_from([1, 2, 3, 4]),
    seed=st.integers(0, 2**31 - 1),
    odd=st.sampled_from([0, 2, 6]),
)
def test_the_generated_check_sets_the_bits_the_tensor_ops_set(engine_kernels, batch, seed, odd):
    """``spec_verify_guard_check`` (one launch: each sequence's bits, ORed into the flag) against the guard's
    tensor ops, on lengths around the table's end, entries that are -1, past int32 or the scratch block, and
    counts out of range: the same flag, bit for bit; and it stays set through a later step that holds."""
    kernel = engine_kernels.get(GUARD_CHECK, W, BT, BS)
    guards = ("min_seq_len >= 0", f"max_seq_len <= {BT * BS - W - 1}", "max_seq_len + 4 <= 2147483647")
    spec = DeviceGuardSpec(W, BT, BS, guards, W + 1, scratch_block=0)
    bufs = _bufs(batch)
    fast, ops = DeviceGuard(spec, "cpu", kernel=kernel, buffers={batch: bufs}), DeviceGuard(spec, "cpu")
    assert fast.uses_kernel(batch) and not ops.uses_kernel(batch)
    assert bufs["guard_params"].tolist() == spec.kernel_params(batch)
    g = torch.Generator().manual_seed(seed)
    rnd = lambda lo, hi, *shape: torch.randint(lo, hi, shape, generator=g, dtype=I32)  # noqa: E731
    bufs["seq_lens"].copy_(rnd(-3, BT * BS + 3, batch))
    table = rnd(1, 64, batch, BT)
    if odd:
        pick = rnd(0, odd + 4, batch, BT)
        table = torch.where(pick == 0, -1, torch.where(pick == 1, 2**31 // BS, torch.where(pick == 2, 0, table)))
    bufs["block_table"].copy_(table)
    bufs["accepted"].copy_(torch.where(rnd(0, 4, batch) == 0, rnd(-2, 2 * W, batch), rnd(0, W, batch)))
    for guard in (fast, ops):
        guard.check(bufs, batch)
    assert int(fast.flag[0]) == int(ops.flag[0]), (fast.names(int(fast.flag[0])), ops.names(int(ops.flag[0])))
    first = int(fast.flag[0])
    # a step inside the domain leaves the flag as it was (sticky), and after a clear sets nothing
    bufs["seq_lens"].copy_(torch.arange(batch, dtype=I32) + 5)
    bufs["block_table"].copy_(torch.arange(1, batch * BT + 1, dtype=I32).view(batch, BT))
    bufs["accepted"].fill_(1)
    fast.check(bufs, batch)
    assert int(fast.flag[0]) == first
    fast.flag.zero_()
    fast.check(bufs, batch)
    assert int(fast.flag[0]) == 0


def test_a_check_that_leaves_the_flag_alone_is_folded_by_the_runtime():
    """A target whose lowering has no atomic OR (ascend) leaves ``guard_flag`` as it is: the guard folds the
    kernel's per-sequence bits into its flag with tensor ops, to the same flag the tensor-op checks give."""
    from specgen.runtime.semantics import spec_verify_guard_check

    def rows_only(seq_lens, block_table, accepted, guard_params, guard_bits, guard_flag):
        spec_verify_guard_check(
            seq_lens, block_table, accepted, guard_params, guard_bits, guard_flag.clone(), block_size=BS
        )

    spec = DeviceGuardSpec(W, BT, BS, ("min_seq_len >= 0", "max_seq_len <= 123", "batch >= 1"), W + 1)
    bufs = _bufs()
    fast, ops = DeviceGuard(spec, "cpu", kernel=rows_only, buffers={4: bufs}), DeviceGuard(spec, "cpu")
    assert fast.uses_kernel(4) and fast.kernel_ors  # the CPU's C kernels OR the bits themselves
    fast.kernel_ors = False  # as on ascend
    bufs["seq_lens"].copy_(torch.tensor([3, 200, 14, -1], dtype=I32))
    bufs["accepted"].copy_(torch.tensor([0, 1, W, 2], dtype=I32))
    for guard in (fast, ops):
        guard.check(bufs, 4)
    assert int(fast.flag[0]) == int(ops.flag[0]) != 0
    assert set(fast.names(int(fast.flag[0]))) == {"min_seq_len >= 0", "max_seq_len <= 123", ACCEPTED_RANGE}


def _bufs(batch=4, accepted=0):
    from specgen.runtime.buffers import alloc_step_buffers

    bufs = alloc_step_buffers(batch, W, BT, block_size=BS, fill_padding=True)
    bufs["block_table"].copy_(torch.arange(1, batch * BT + 1, dtype=I32).view(batch, BT))
    bufs["accepted"].fill_(accepted)
    return bufs


@pytest.mark.parametrize(
    "where, value, bits",
    [
        ("seq_lens", -1, {"min_seq_len >= 0"}),
        ("seq_lens", BT * BS - W, {"max_seq_len <= 123"}),  # its last position has no block: not an entry fault
        ("entry_needed", -1, {BLOCK_ENTRY}),
        ("entry_needed", 2**31 // BS, {BLOCK_ENTRY}),
        ("entry_unneeded", -1, set()),
        ("accepted", W, {ACCEPTED_RANGE}),
        ("accepted", -1, {ACCEPTED_RANGE}),
        ("accepted", W - 1, set()),
    ],
)
def test_each_condition_sets_its_bit(where, value, bits):
    spec = DeviceGuardSpec(W, BT, BS, ("min_seq_len >= 0", "max_seq_len <= 123", "batch >= 1"), W + 1)
    guard = DeviceGuard(spec, "cpu")
    bufs = _bufs()
    bufs["seq_lens"].copy_(torch.tensor([3, 30, 14, 0], dtype=I32))
    if where == "seq_lens":
        bufs["seq_lens"][2] = value
    elif where == "entry_needed":  # row 2 maps positions 14 .. 18: blocks 0 and 1
        bufs["block_table"][2, 1] = value
    elif where == "entry_unneeded":
        bufs["block_table"][2, 2] = value
    else:
        bufs["accepted"][1] = value
    guard.fork(bufs, 4)
    guard.join()
    assert set(guard.names(int(guard.flag[0]))) == bits
    sticky = int(guard.flag[0])
    bufs["seq_lens"][2] = 5
    bufs["block_table"][2].fill_(9)
    bufs["accepted"].zero_()
    guard.fork(bufs, 4)
    assert int(guard.flag[0]) == sticky  # the flag stays set until the host clears it


def test_a_guard_without_a_side_stream_checks_in_line():
    """``beside=False`` (a runtime without side streams): no stream is made even with a device API; ``fork`` runs
    the checks on the current stream at once (the flag is set before ``join``), and ``join`` waits for nothing."""

    class NoStreams:
        def new_stream(self, device):
            raise AssertionError("a guard without side streams made a stream")

        def current_stream(self, device):
            raise AssertionError("a guard without side streams ordered streams")

    spec = DeviceGuardSpec(W, BT, BS, ("min_seq_len >= 0", "max_seq_len <= 123", "batch >= 1"), W + 1)
    guard = DeviceGuard(spec, "cpu", api=NoStreams(), beside=False)
    assert guard.stream is None
    bufs = _bufs()
    bufs["seq_lens"].copy_(torch.tensor([3, 300, 14, 0], dtype=I32))
    guard.mark()
    guard.fork(bufs, 4)
    assert guard.names(int(guard.flag[0])) == ["max_seq_len <= 123"]
    guard.join()
    with pytest.raises(AssertionError, match="made a stream"):
        DeviceGuard(spec, "cpu", api=NoStreams())
