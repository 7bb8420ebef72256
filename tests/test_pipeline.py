import json

import pytest

from specgen.cli import main
from specgen.passes.boundaries import Capabilities, build_boundary
from specgen.passes.cost import CostModel, bubble_us
from specgen.passes.interpreter import outputs_equal
from specgen.passes.manager import PASSES, PassPipelineError, parse_pipeline, run_pipeline
from specgen.passes.render import render_mermaid, summary

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
    assert "prepare_next_draft" in fams and "greedy_prefix_verify" in fams
    assert sa["graph_ops"][0] == "target_forward"
    assert any("deferred 'sync_accept'" in n for n in ctx.notes)  # the host still gets its tokens
    assert outputs_equal(before, after, seed=width) == []


@pytest.mark.parametrize("width", [2, 5, 16])
def test_context_kv_uses_context_kv_update(width):
    before = build_boundary("context-kv", width=width, batch=3, block_size=16, block_table_width=8)
    after, _ = run_pipeline(before)
    sa = summary(after)
    assert "context_kv_update" in [f["family"] for f in sa["kernel_families"]]
    assert sa["host_syncs_on_critical_path"] == 0
    assert sa["predicted_bubble_us"] < summary(before)["predicted_bubble_us"]
    assert outputs_equal(before, after, seed=width) == []


def test_linear_state_and_int64_drafts():
    before = build_boundary("draft-to-verify", width=4, batch=2, draft_dtype="int64",
                            caps=Capabilities(has_linear_state=True))
    after, ctx = run_pipeline(before)
    assert outputs_equal(before, after, seed=3) == []
    assert summary(after)["kernel_families"][0]["key"] == "spec_verify_head_update__w4_bt64_bs128_i64"
    assert any("linear_state_indices" in n for n in ctx.notes)


@pytest.mark.parametrize("name", ["draft-to-verify", "verify-to-draft", "context-kv"])
def test_pipeline_is_idempotent(name):
    once, _ = run_pipeline(build_boundary(name, width=5, batch=2))
    twice, _ = run_pipeline(once)
    assert twice.ops == once.ops


def test_registry_keys_are_pass_names():
    for key, cls in PASSES.items():
        assert key == cls.name


def test_pipeline_options_and_errors():
    (fuse,) = parse_pipeline("fuse{max-group=2}")
    assert fuse.max_group == 2
    with pytest.raises(PassPipelineError, match="unknown pass"):
        parse_pipeline("hoist,nope")
    with pytest.raises(PassPipelineError, match="no option"):
        parse_pipeline("fuse{size=2}")


def test_refused_fusion_says_why():
    g = build_boundary("draft-to-verify", width=4, batch=1)
    _, ctx = run_pipeline(g, "sync-to-event,fuse{max-group=2}")
    assert any("spec_verify_metadata_update: not fused: 4 members exceed max-group=2" in n for n in ctx.notes)


def test_dump_dir_has_every_stage(tmp_path):
    run_pipeline(build_boundary("context-kv", width=3, batch=1), dump_dir=tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["000_input.txt", "001_sync-to-event.txt", "002_hoist.txt", "003_fuse.txt",
                     "004_fuse-chain.txt", "005_capture.txt"]
    assert "graph_replay" in (tmp_path / "005_capture.txt").read_text()


def test_cost_calibration_file(tmp_path):
    g = build_boundary("draft-to-verify", width=4, batch=1)
    cal = tmp_path / "c.json"
    cal.write_text(json.dumps({"run": {"host_compute": 100.0}}))
    assert bubble_us(g, CostModel.from_json(cal)) > bubble_us(g) + 100
    cal.write_text(json.dumps({"run": {"warp_drive": 1}}))
    with pytest.raises(ValueError, match="unknown op kinds"):
        CostModel.from_json(cal)


def test_mermaid_has_swimlanes():
    text = render_mermaid(build_boundary("draft-to-verify", width=4, batch=1))
    assert text.startswith("sequenceDiagram") and "participant H as host" in text and "participant D as draft" in text


def test_cli_plan_json(capsys):
    assert main(["plan", "--boundary", "draft-to-verify", "--width", "4", "--batch", "8", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for side in ("before", "after"):
        for key in ("host_syncs_on_critical_path", "host_calls_after_final_draft", "h2d_copies_on_critical_path",
                    "predicted_bubble_us", "graph_ops", "kernel_families"):
            assert key in data[side]
    fam = data["after"]["kernel_families"][0]
    assert set(fam) >= {"family", "width", "block_table_width", "block_size"}


@pytest.mark.parametrize("argv, message", [
    (["plan", "--boundary", "nope"], "unknown boundary"),
    (["plan", "--boundary", "context-kv", "--width", "17"], "width 17"),
    (["plan", "--boundary", "context-kv", "--width", "1"], "width 1"),
    (["plan", "--boundary", "context-kv", "--batch", "0"], "batch 0"),
    (["plan", "--boundary", "context-kv", "--pipeline", "hoist,bogus"], "unknown pass"),
    (["plan", "--boundary", "context-kv", "--width", "four"], "invalid int"),
    (["plan"], "required"),
])
def test_cli_bad_input_is_one_line_and_status_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_doctor_reports_targets_and_missing_kernels(capsys, tmp_path):
    assert main(["doctor", "--kernels", str(tmp_path / "none")]) == 1
    out = capsys.readouterr().out
    assert "target c:" in out and "target cuda:" in out and "not loadable" in out
