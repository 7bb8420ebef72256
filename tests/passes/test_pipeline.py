"""The default pipeline on every boundary: the bubble's host work is gone, the values are the same."""

import pytest

from specgen.passes import build_boundary, run_pipeline, summary
from specgen.passes.ir.interpreter import outputs_equal
from specgen.specializations.capabilities import SpeculativeVerifyCapabilities as Capabilities
from specgen.specializations.families import FAMILIES

HEAD = ["spec_verify_token_update", "spec_verify_metadata_update", "spec_verify_attention_tiling_update"]


@pytest.mark.parametrize("batch", [1, 8, 64])
@pytest.mark.parametrize("width", range(2, 17))
def test_draft_to_verify_acceptance(width, batch):
    before = build_boundary("draft-to-verify", width=width, batch=batch)
    after, _ = run_pipeline(before)
    sb, sa = summary(before), summary(after)
    assert sa["host_syncs_on_critical_path"] == 0 < sb["host_syncs_on_critical_path"]
    assert sa["h2d_copies_on_critical_path"] == 0
    assert sa["host_calls_after_final_draft"] == 0
    # fuse made one op per family, fuse-chain made the three one launch at the graph's head
    assert [f["family"] for f in sa["kernel_families"]] == ["spec_verify_head_update"]
    assert sa["graph_ops"] == [f"spec_verify_head_update__w{width}_bt64_bs128", "target_forward"]
    assert sa["predicted_bubble_us"] < sb["predicted_bubble_us"]
    if batch == 8:
        assert outputs_equal(before, after, seed=width) == []


@pytest.mark.parametrize("width", [2, 4, 6])
def test_without_fuse_chain_the_head_stays_three_launches(width):
    before = build_boundary("draft-to-verify", width=width, batch=8)
    after, _ = run_pipeline(before, "sync-to-event,hoist,fuse,capture")
    sa = summary(after)
    assert [f["family"] for f in sa["kernel_families"][:3]] == HEAD
    assert sa["graph_ops"][:3] == [f["key"] for f in sa["kernel_families"][:3]]
    assert sa["graph_ops"][3] == "target_forward"
    assert sa["kernel_families"][1]["key"] == f"spec_verify_metadata_update__w{width}_bt64_bs128"
    chained, _ = run_pipeline(before)
    assert summary(chained)["predicted_bubble_us"] < sa["predicted_bubble_us"]  # two launches fewer
    assert outputs_equal(before, after, seed=width) == [] and outputs_equal(before, chained, seed=width) == []


@pytest.mark.parametrize("width", [2, 4, 6, 16])
def test_verify_to_draft_uses_prepare_next_draft(width):
    before = build_boundary("verify-to-draft", width=width, batch=4, block_size=16, block_table_width=8)
    after, ctx = run_pipeline(before)
    sa = summary(after)
    assert sa["host_syncs_on_critical_path"] == 0 and sa["host_calls_after_final_draft"] == 0
    fams = [f["family"] for f in sa["kernel_families"]]
    assert fams == ["spec_verify_tail_update"]  # verification and the next draft's inputs, one launch
    assert FAMILIES[fams[0]].members == ("greedy_prefix_verify", "prepare_next_draft")
    assert sa["graph_ops"][0] == "target_forward"
    assert any("deferred 'sync_accept'" in n for n in ctx.notes)  # the host still gets its tokens
    assert outputs_equal(before, after, seed=width) == []


@pytest.mark.parametrize("width", [2, 5, 16])
def test_context_kv_uses_context_kv_update(width):
    before = build_boundary("context-kv", width=width, batch=3, block_size=16, block_table_width=8)
    after, _ = run_pipeline(before)
    sa = summary(after)
    assert [f["family"] for f in sa["kernel_families"]] == ["spec_verify_context_tail_update"]
    members = ("greedy_prefix_verify", "prepare_next_block", "context_kv_update")
    assert FAMILIES["spec_verify_context_tail_update"].members == members
    # the one launch leaves the next block's anchor too (what the next block forward reads)
    replay = next(o for o in after.ops if o.name == "target_replay")
    assert [s.name for s in replay.attr("graph_steps")][1:] == [f"spec_verify_context_tail_update__w{width}_bt8_bs16"]
    assert {"context_slots", "next_last_token", "next_seq_lens"} <= set(replay.writes)
    assert sa["host_syncs_on_critical_path"] == 0
    assert sa["predicted_bubble_us"] < summary(before)["predicted_bubble_us"]
    assert outputs_equal(before, after, seed=width) == []


def test_linear_state_and_int64_drafts():
    before = build_boundary(
        "draft-to-verify", width=4, batch=2, draft_dtype="int64", caps=Capabilities(has_linear_state=True)
    )
    after, ctx = run_pipeline(before)
    assert outputs_equal(before, after, seed=3) == []
    assert [f["key"] for f in summary(after)["kernel_families"]] == [
        "spec_verify_hybrid_head_update__w4_bt64_bs128_i64"
    ]
    assert not any("not fused" in n for n in ctx.notes)
    replay = after.op("target_replay")
    assert {"state_read_slot", "state_write_slots"} <= set(replay.writes)  # computed inside the graph now
    plain, plain_ctx = run_pipeline(build_boundary("draft-to-verify", width=4, batch=2))
    assert [f["family"] for f in summary(plain)["kernel_families"]] == ["spec_verify_head_update"]
    assert not any("hybrid" in n for n in plain_ctx.notes)  # the hybrid head is not for this boundary
