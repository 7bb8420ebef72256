"""The fallback decision: the first condition that keeps a step off the captured path."""

from __future__ import annotations

import pytest
import torch

from specgen.runtime.fallback import FALLBACK_REASONS, fallback_reason, seq_len_bounds
from specgen.runtime.guards import check_guards
from specgen.runtime.step_plan import StepPlan
from specgen.specializations.capabilities import SpeculativeVerifyCapabilities

BT, BS = 8, 16
ON = SpeculativeVerifyCapabilities(supports_in_graph_input_update=True, block_size=BS, block_table_width=BT)
BUCKETS = (1, 2, 4, 8)


class Guarded:
    """A kernel stand-in with one guard; records the bucket it was asked about."""

    def __init__(self, limit):
        self.limit, self.batches = limit, []

    def check_guards(self, *, min_seq_len, max_seq_len, batch):
        self.batches.append(batch)
        return check_guards(
            [(f"max_seq_len <= {self.limit}", "")], min_seq_len=min_seq_len, max_seq_len=max_seq_len, batch=batch
        )


def plan(limit=100):
    return StepPlan(kv_layout=(BT, BS), kernels={"k": Guarded(limit)})


def table(bt=BT):
    return torch.zeros(3, bt, dtype=torch.int32)


@pytest.mark.parametrize(
    "caps, step_plan, batch, tbl, bounds, want",
    [
        (SpeculativeVerifyCapabilities(), plan(), 3, table(), (0, 10), "capability_off"),
        (ON, StepPlan(unavailable="variant_not_built"), 3, table(), (0, 10), "variant_not_built"),
        (
            SpeculativeVerifyCapabilities(supports_in_graph_input_update=True, block_size=32, block_table_width=BT),
            plan(),
            3,
            table(),
            (0, 10),
            "layout_mismatch",
        ),
        (ON, plan(), 3, table(BT + 1), (0, 10), "layout_mismatch"),
        (ON, plan(), 9, None, (0, 10), "batch_exceeds_buckets"),
        (ON, plan(), 3, table(), (0, 101), "guard_failed"),
        (ON, plan(), 3, table(), (0, 100), None),
    ],
)
def test_reasons_in_order(caps, step_plan, batch, tbl, bounds, want):
    assert fallback_reason(caps, step_plan, BUCKETS, batch, tbl, bounds) == want
    assert want is None or want in FALLBACK_REASONS


def test_guards_see_the_bucket():
    p = plan()
    fallback_reason(ON, p, BUCKETS, 3, None, (0, 1))
    assert p.kernels["k"].batches == [4]


def test_seq_len_bounds():
    lens = torch.tensor([4, 9, 2], dtype=torch.int32)
    assert seq_len_bounds(lens, None, on_host=True) == (2, 9)
    assert seq_len_bounds(lens, (3, 5), on_host=True) == (2, 9)  # widened by the data on the host
    assert seq_len_bounds(lens, (3, 5), on_host=False) == (3, 5)  # trusted on a device
    assert seq_len_bounds(lens, None, on_host=False) == (2, 9)
    assert seq_len_bounds(lens[:0], (1, 2), on_host=True) == (1, 2)
    assert seq_len_bounds(lens[:0], None, on_host=False) == (0, 0)


def test_a_kernels_guards_are_collected_once(make_planned_build, tmp_path):
    """The per-step guard check reads the manifest's entries once per kernel, then only evaluates the guards."""
    from specgen.runtime.library import KernelLibrary

    lib = KernelLibrary(make_planned_build(tmp_path / "b", bt=8, bs=16))
    kernel = lib.get("spec_verify_head_update", 4, 8, 16)
    calls = []
    entries = lib.entries
    lib.entries = lambda: (calls.append(1), entries())[1]
    first = kernel.check_guards(min_seq_len=0, max_seq_len=100, batch=4)
    assert first.ok and len(calls) == 1
    bad = kernel.check_guards(min_seq_len=0, max_seq_len=8 * 16, batch=4)
    assert not bad.ok and bad.failed == [("max_seq_len + 4 <= 128", "S + W <= BT * BS")] and len(calls) == 1
