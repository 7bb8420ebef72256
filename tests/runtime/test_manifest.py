"""manifest.json: every problem is a ManifestError naming the file and the field."""

from __future__ import annotations

import json

import pytest

from specgen.runtime.library import KernelLibrary
from specgen.runtime.manifest import ManifestError, load_manifest

W = 4
FAMILY = "spec_verify_token_update"


def test_manifest_errors_name_file_and_field(token_build, tmp_path):
    data = json.loads((token_build / "manifest.json").read_text())
    cases = [
        ("schema_version", 1, "schema_version"),
        ("sha256", None, "'sha256'"),
        ("guards", [{"expr": "__import__('os')"}], "guards\\[0\\]: field 'expr'"),
        ("artifact", "../../etc/passwd", "'artifact'"),
    ]
    for field, value, match in cases:
        bad = json.loads(json.dumps(data))
        if field == "schema_version":
            bad[field] = value
        elif value is None:
            del bad["variants"][0][field]
        else:
            bad["variants"][0][field] = value
        path = tmp_path / f"{field}.json"
        path.write_text(json.dumps(bad))
        with pytest.raises(ManifestError, match=f"{path.name}.*{match}"):
            load_manifest(path)
    bad = json.loads(json.dumps(data))
    bad["variants"][0]["args"][0]["dtype"] = "float64"  # int32, int64 and float32 (sampled verification's floats)
    (tmp_path / "dtype.json").write_text(json.dumps(bad))
    with pytest.raises(
        ManifestError, match=r"dtype.json.*args\[0\]: field 'dtype' must be one of int32, int64, float32"
    ):
        load_manifest(tmp_path / "dtype.json")
    with pytest.raises(ManifestError, match="no manifest"):
        KernelLibrary(tmp_path / "nowhere")


@pytest.mark.parametrize(
    "damage, match",
    [
        (lambda rec: rec.pop("steps"), r"plans\['draft-to-verify'\]\['w4_bt8_bs16_int32'\]: missing field 'steps'"),
        (lambda rec: rec.pop("layout"), r"missing field 'layout'"),
        (lambda rec: rec["layout"].update(block_size="16"), r"layout: field 'block_size' must be"),
        (lambda rec: rec["steps"][0].pop("kind"), r"steps\[0\]: missing field 'kind'"),
        (lambda rec: rec["steps"][0].pop("family"), r"steps\[0\]: missing field 'family'"),
        (lambda rec: rec["steps"][1].update(kind="launch"), r"kind 'launch' is not one of"),
        (lambda rec: rec["steps"][0].update(key="spec_verify_head_update__w4_bt8_bs32"), "does not match its layout"),
        (lambda rec: rec.update(steps="kernel"), r"field 'steps' must be"),
    ],
)
def test_malformed_plan_names_the_field(make_planned_build, tmp_path, damage, match):
    root = make_planned_build(tmp_path / "build")
    data = json.loads((root / "manifest.json").read_text())
    damage(data["plans"]["draft-to-verify"]["w4_bt8_bs16_int32"])
    (root / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ManifestError, match=f"manifest.json.*{match}"):
        load_manifest(root)


def test_plans_read_back_as_records(make_planned_build, tmp_path):
    from specgen.specializations.plan import DRAFT_TO_VERIFY, VERIFY_TO_DRAFT
    from specgen.specializations.variants import Layout

    manifest = load_manifest(make_planned_build(tmp_path / "build"))
    layout = Layout(4, 8, 16)
    assert manifest.layouts(DRAFT_TO_VERIFY) == (layout,) and manifest.layouts("context-kv") == ()
    plan = manifest.plan(VERIFY_TO_DRAFT, layout)
    assert [s.kind for s in plan.steps] == ["copy", "forward", "kernel", "other", "kernel", "copy"]
    assert [v.family for v in plan.kernels] == ["greedy_prefix_verify", "prepare_next_draft"]
    assert manifest.plan(VERIFY_TO_DRAFT, Layout(4, 8, 32)) is None
    assert all(e.variant.key == e.key for e in manifest.variants)
