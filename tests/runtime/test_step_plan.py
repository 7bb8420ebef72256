"""The step plan: layout and step sequence resolved from a manifest's structured plans."""

from __future__ import annotations

import pytest
import torch

from specgen.runtime.library import KernelLibrary
from specgen.runtime.step_plan import (
    DEFAULT_SEQUENCE,
    StepPlan,
    built_layouts,
    eager_step,
    eager_steps,
    hoist_split,
    resolve_step_plan,
    run_steps,
    semantics_call,
)
from specgen.specializations.capabilities import SpeculativeVerifyCapabilities

W, BT, BS = 4, 8, 16
I32 = torch.int32
CAPS = SpeculativeVerifyCapabilities(supports_in_graph_input_update=True, block_size=BS, block_table_width=BT)
SEQUENCE = (
    f"spec_verify_head_update__w{W}_bt{BT}_bs{BS}",
    "target_forward",
    f"greedy_prefix_verify__w{W}",
    f"prepare_next_draft__w{W}_bt{BT}_bs{BS}",
)


@pytest.fixture
def lib(make_planned_build, tmp_path):
    return KernelLibrary(make_planned_build(tmp_path / "build"))


def test_sequence_is_the_plans_kernel_and_forward_steps(lib):
    plan = resolve_step_plan(lib, CAPS, W, "cpu")
    assert plan.unavailable is None and plan.kv_layout == (BT, BS)
    # draft-to-verify whole, then verify-to-draft after its forward; copies and other ops stay out
    assert tuple(s.name for s in plan.steps) == SEQUENCE
    assert [s.kind for s in plan.steps] == ["kernel", "forward", "kernel", "kernel"]
    assert set(plan.kernels) == {SEQUENCE[0], SEQUENCE[2], SEQUENCE[3]}
    assert plan.kernels[SEQUENCE[0]].key() == SEQUENCE[0]
    assert plan.num_splits == 8  # the head update's tiling member carries the split count


def test_layout_choice(lib):
    assert built_layouts(lib, W) == [(BT, BS)] and built_layouts(lib, W + 1) == []
    other = SpeculativeVerifyCapabilities(supports_in_graph_input_update=True, block_size=32, block_table_width=BT)
    assert resolve_step_plan(lib, other, W, "cpu").kv_layout == (BT, BS)  # the first built one
    assert resolve_step_plan(lib, CAPS, W, "cpu", block_table_width=BT, block_size=BS).kv_layout == (BT, BS)
    explicit = resolve_step_plan(lib, CAPS, W, "cpu", block_table_width=BT, block_size=32)
    missing = f"the draft-to-verify plan at w{W}_bt{BT}_bs32_int32"
    assert explicit == StepPlan(kv_layout=(BT, 32), unavailable="variant_not_built", missing=missing)  # no plan there
    assert resolve_step_plan(lib, CAPS, W + 1, "cpu") == StepPlan(
        unavailable="variant_not_built", missing=f"a draft-to-verify plan of width {W + 1}"
    )


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


MEMBERS = ("spec_verify_token_update", "spec_verify_metadata_update", "spec_verify_attention_tiling_update")
DRAFT = (("draft_tokens",), ("tokens", "accepted", "next_seq_lens", "block_table"))  # what a draft writes, reads


def test_hoisting_splits_the_head_around_a_prologue(make_planned_build, tmp_path):
    """Beside a draft that writes only the drafts, the metadata and tiling members run; the token update stays."""
    lib = KernelLibrary(make_planned_build(tmp_path / "b", extra=MEMBERS))
    plan = resolve_step_plan(lib, CAPS, W, "cpu", hoist_around=DRAFT)
    assert [s.variant.family for s in plan.hoisted] == list(MEMBERS[1:])
    assert [s.name for s in plan.steps] == [f"spec_verify_token_update__w{W}", *SEQUENCE[1:]]
    assert set(plan.kernels) == {s.name for s in (*plan.hoisted, *plan.steps) if s.kind == "kernel"}
    assert plan.num_splits == 8 and plan.hoisted[1].variant.num_splits == 8
    # no prologue, or one that also writes the lengths the members read: the build's plan, unsplit
    assert resolve_step_plan(lib, CAPS, W, "cpu").hoisted == ()
    assert resolve_step_plan(lib, CAPS, W, "cpu", hoist_around=(("draft_tokens", "seq_lens"), ())).hoisted == ()
    # a prologue that reads what a member writes keeps that member after it
    part = resolve_step_plan(lib, CAPS, W, "cpu", hoist_around=(("draft_tokens",), ("positions",)))
    assert [s.variant.family for s in part.hoisted] == [MEMBERS[2]]
    assert [s.variant.family for s in part.steps if s.kind == "kernel"][:2] == [MEMBERS[0], MEMBERS[1]]


def test_hoisting_needs_the_members_built(lib):
    """Without the members' variants the head stays one kernel after the prologue."""
    plan = resolve_step_plan(lib, CAPS, W, "cpu", hoist_around=DRAFT)
    assert plan.unavailable is None and plan.hoisted == () and tuple(s.name for s in plan.steps) == SEQUENCE
    torch_plan = resolve_step_plan(lib, CAPS, W, "cpu", kernels="torch", hoist_around=DRAFT)
    assert [s.variant.family for s in torch_plan.hoisted] == list(MEMBERS[1:])  # the semantics need no build


def test_nothing_moves_past_the_forward():
    steps = eager_steps(W, BT, BS)
    hoisted, rest = hoist_split(steps, ("draft_tokens",))
    assert [s.variant.family for s in hoisted] == list(MEMBERS[1:])
    assert [s.name for s in rest][1:] == [s.name for s in steps][3:]  # the forward and the tail keep their order
