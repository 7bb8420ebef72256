"""Plan records: as_dict / from_dict round trip and the errors of malformed records."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specgen.specializations import BOUNDARY_NAMES, FAMILIES, Layout, Plan, PlanError, PlanStep, VariantSpec

layouts = st.builds(
    Layout, st.integers(2, 16), st.integers(1, 128), st.integers(1, 256), st.sampled_from(["int32", "int64"])
)


def _step(draw, layout):
    kind = draw(st.sampled_from(["kernel", "copy", "other"]))
    if kind == "kernel":
        return PlanStep.kernel(VariantSpec.of(draw(st.sampled_from(sorted(FAMILIES))), layout))
    return PlanStep(kind, draw(st.sampled_from(["h2d_copy", "record_event", "sync"])))


@given(st.data(), layouts, st.sampled_from(BOUNDARY_NAMES))
def test_roundtrip_through_json(data, layout, boundary):
    steps = [_step(data.draw, layout) for _ in range(data.draw(st.integers(0, 4)))]
    steps.insert(data.draw(st.integers(0, len(steps))), PlanStep.forward())
    plan = Plan(boundary, layout, tuple(steps))
    back = Plan.from_dict(boundary, json.loads(json.dumps(plan.as_dict())), 8)
    assert back == plan
    assert back.kernels == tuple(s.variant for s in steps if s.kind == "kernel")


def test_record_keeps_the_string_lists_beside_the_structure():
    lay = Layout(4, 64, 128)
    spec = VariantSpec.of("greedy_prefix_verify", lay)
    rec = Plan("verify-to-draft", lay, (PlanStep.forward(), PlanStep.kernel(spec))).as_dict()
    assert rec["graph_ops"] == ["target_forward", "greedy_prefix_verify__w4"]
    assert rec["kernel_families"] == ["greedy_prefix_verify__w4"]
    assert rec["layout"] == {"width": 4, "block_table_width": 64, "block_size": 128, "draft_dtype": "int32"}
    assert rec["steps"][1] == {"kind": "kernel", "name": spec.key, "family": spec.family, "key": spec.key}


def test_after_forward():
    lay = Layout(4, 64, 128)
    k = PlanStep.kernel(VariantSpec.of("greedy_prefix_verify", lay))
    assert Plan("verify-to-draft", lay, (k, PlanStep.forward(), k)).after_forward() == (k,)
    with pytest.raises(PlanError, match="no target forward"):
        Plan("verify-to-draft", lay, (k,)).after_forward()


def test_step_errors():
    with pytest.raises(PlanError, match="kind"):
        PlanStep("launch", "x")
    with pytest.raises(PlanError, match="carries a variant"):
        PlanStep("kernel", "x")
    with pytest.raises(PlanError, match="carries a variant"):
        PlanStep("copy", "x", VariantSpec("greedy_prefix_verify", 4))


@pytest.mark.parametrize(
    "rec, match",
    [
        ({}, "malformed"),
        ({"layout": {"width": 4}, "steps": []}, "malformed"),
        (
            {"layout": {"width": 4, "block_table_width": 64, "block_size": 128}, "steps": [{"kind": "kernel"}]},
            "malformed",
        ),
        (
            {
                "layout": {"width": 4, "block_table_width": 64, "block_size": 128},
                "steps": [{"kind": "kernel", "family": "greedy_prefix_verify", "key": "greedy_prefix_verify__w5"}],
            },
            "does not match its layout",
        ),
        (
            {
                "layout": {"width": 4, "block_table_width": 64, "block_size": 128},
                "steps": [{"kind": "kernel", "family": "nope", "key": "nope__w4"}],
            },
            "malformed",
        ),
        (
            {
                "layout": {"width": 4, "block_table_width": 64, "block_size": 128},
                "steps": [{"kind": "launch", "name": "x"}],
            },
            "kind",
        ),
    ],
)
def test_malformed_records(rec, match):
    with pytest.raises(PlanError, match=match):
        Plan.from_dict("draft-to-verify", rec)
