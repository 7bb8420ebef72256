"""The registry, pipeline text, the fixed-point loop and the between-pass dumps."""

import pytest

from specgen.passes import PASSES, PassPipelineError, build_boundary, manager, parse_pipeline, run_pipeline


@pytest.mark.parametrize("name", ["draft-to-verify", "verify-to-draft", "context-kv"])
def test_pipeline_is_idempotent(name):
    once, _ = run_pipeline(build_boundary(name, width=5, batch=2))
    twice, _ = run_pipeline(once)
    assert twice.ops == once.ops


def test_registry_keys_are_pass_names():
    for key, cls in PASSES.items():
        assert key == cls.name
    assert manager.PASSES is PASSES


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
    assert names == [
        "000_input.txt",
        "001_sync-to-event.txt",
        "002_hoist.txt",
        "003_fuse.txt",
        "004_fuse-chain.txt",
        "005_capture.txt",
    ]
    assert "graph_replay" in (tmp_path / "005_capture.txt").read_text()
