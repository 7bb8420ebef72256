"""The step plan: layout and step sequence resolved from a manifest's structured plans."""

from __future__ import annotations

import pytest
import torch

from specgen.runtime.library import KernelLibrary
from specgen.runtime.step_plan import (DEFAULT_SEQUENCE, StepPlan, built_layouts, eager_step, eager_steps,
                                       resolve_step_plan, run_steps, semantics_call)
from specgen.specializations.capabilities import SpeculativeVerifyCapabilities

W, BT, BS = 4, 8, 16
I32 = torch.int32
CAPS = SpeculativeVerifyCapabilities(supports_in_graph_input_update=True, block_size=BS, block_table_width=BT)
SEQUENCE = (f"spec_verify_head_update__w{W}_bt{BT}_bs{BS}", "target_forward", f"greedy_prefix_verify__w{W}",
            f"prepare_next_draft__w{W}_bt{BT}_bs{BS}")


@pytest.fixture
def lib(make_planned_build, tmp_path):
    return KernelLibrary(make_planned_build(tmp_path / "build"))


def test_sequence_is_the_plans_kernel_and_forward_steps(lib):
    plan = resolve_step_plan(lib, CAPS, W, "cpu")
    assert plan.unavailable is None and plan.layout == (BT, BS)
    # draft-to-verify whole, then verify-to-draft after its forward; copies and other ops stay out
    assert tuple(s.name for s in plan.steps) == SEQUENCE
    assert [s.kind for s in plan.steps] == ["kernel", "forward", "kernel", "kernel"]
    assert set(plan.kernels) == {SEQUENCE[0], SEQUENCE[2], SEQUENCE[3]}
    assert plan.kernels[SEQUENCE[0]].key() == SEQUENCE[0]
    assert plan.num_splits == 8  # the head update's tiling member carries the split count


def test_layout_choice(lib):
    assert built_layouts(lib, W) == [(BT, BS)] and built_layouts(lib, W + 1) == []
    other = SpeculativeVerifyCapabilities(supports_in_graph_input_update=True, block_size=32, block_table_width=BT)
    assert resolve_step_plan(lib, other, W, "cpu").layout == (BT, BS)  # the first built one
    assert resolve_step_plan(lib, CAPS, W, "cpu", block_table_width=BT, block_size=BS).layout == (BT, BS)
    explicit = resolve_step_plan(lib, CAPS, W, "cpu", block_table_width=BT, block_size=32)
    assert explicit == StepPlan(layout=(BT, 32), unavailable="variant_not_built")  # no plan at that layout
    assert resolve_step_plan(lib, CAPS, W + 1, "cpu") == StepPlan(unavailable="variant_not_built")


def test_torch_kernels_need_no_variants(make_planned_build, tmp_path):
    lib = KernelLibrary(make_planned_build(tmp_path / "b", missing=("greedy_prefix_verify",)))
    built = resolve_step_plan(lib, CAPS, W, "cpu")
    assert built.unavailable == "variant_not_built" and built.steps == () and not built.kernels
    torch_plan = resolve_step_plan(lib, CAPS, W, "cpu", kernels="torch")
    assert torch_plan.unavailable is None and tuple(s.name for s in torch_plan.steps) == SEQUENCE
    assert not torch_plan.kernels
    # the variants exist for the c target only
    assert resolve_step_plan(lib, CAPS, W, "cuda").unavailable == "variant_not_built"


def test_eager_steps_follow_the_default_sequence():
    steps = eager_steps(W, BT, BS)
    assert [s.variant.family if s.kind == "kernel" else s.name for s in steps] == list(DEFAULT_SEQUENCE)
    assert steps[1].name == f"spec_verify_metadata_update__w{W}_bt{BT}_bs{BS}"


def test_run_steps_order_and_eager_step():
    calls = []

    def forward(bufs):
        calls.append("target_forward")
        return torch.arange(bufs["target_tokens"].numel(), dtype=I32)

    seen = semantics_call(BS, 8)

    def call(step, args):
        calls.append(step.variant.family)
        seen(step, args)

    last = torch.tensor([5, 6], dtype=I32)
    drafts = torch.tensor([[0, 1, 9], [4, 5, 6]], dtype=I32)  # the forward gives rows 0..3, 4..7
    seq_lens = torch.tensor([3, 20], dtype=I32)
    table = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]] * 2, dtype=I32)
    bufs = eager_step(forward, W, BS, 8, last, drafts, seq_lens, table)
    assert calls == ["target_forward"]  # eager_step runs the semantics itself
    assert bufs["accepted"].tolist() == [2, 3] and bufs["next_seq_lens"].tolist() == [6, 24]
    calls.clear()
    run_steps(bufs, eager_steps(W, BT, BS), forward, call)
    assert calls == list(DEFAULT_SEQUENCE)
    empty = eager_step(forward, W, BS, 8, last[:0], drafts[:0], seq_lens[:0], table[:0])
    assert empty["accepted"].shape == (0,)
