"""Plans: the default pipeline's graph steps, typed, for every boundary x layout of a matrix."""

from specgen.passes import plan_boundary, plan_variants
from specgen.specializations.matrix import Matrix
from specgen.specializations.plan import PlanStep
from specgen.specializations.variants import Layout, VariantSpec


def test_draft_to_verify_plan_is_the_head_update_then_the_forward():
    layout = Layout(4, 64, 128)
    plan = plan_boundary("draft-to-verify", layout)
    assert plan.steps == (PlanStep.kernel(VariantSpec.of("spec_verify_head_update", layout)), PlanStep.forward())


def test_variants_include_a_composites_members():
    matrix = Matrix(widths=(3,), block_table_widths=(8,), block_sizes=(16,), draft_dtypes=("int32",))
    specs, needed_by, plans = plan_variants(matrix, boundaries=("draft-to-verify",))
    assert [s.key for s in specs] == sorted(s.key for s in specs)
    assert {s.family for s in specs} == {
        "spec_verify_head_update",
        "spec_verify_token_update",
        "spec_verify_metadata_update",
        "spec_verify_attention_tiling_update",
        "spec_verify_guard_check",  # the device guard's checks: a companion of the head's plan
    }
    assert all(b == {"draft-to-verify"} for b in needed_by.values()) and len(plans) == 1
