"""The cost model: defaults, calibration files."""

import json

import pytest

from specgen.passes import CostModel, bubble_us, build_boundary


def test_cost_calibration_file(tmp_path):
    g = build_boundary("draft-to-verify", width=4, batch=1)
    cal = tmp_path / "c.json"
    cal.write_text(json.dumps({"run": {"host_compute": 100.0}}))
    assert bubble_us(g, CostModel.from_json(cal)) > bubble_us(g) + 100
    cal.write_text(json.dumps({"run": {"warp_drive": 1}}))
    with pytest.raises(ValueError, match="unknown op kinds"):
        CostModel.from_json(cal)


def test_calibration_file_sections_and_their_errors(tmp_path):
    """``host_family`` shares a measured step among a family's host ops; provenance is read by nobody."""
    g = build_boundary("draft-to-verify", width=4, batch=1)
    cal = tmp_path / "c.json"
    doc = {
        "run": {"h2d": 2.0},
        "host_family": {"spec_verify_metadata_update": 40.0},
        "measured": {"run.h2d": {"us": 2.0, "samples": 9}},
        "source": {"device": "x"},
        "by_batch": {},
    }
    cal.write_text(json.dumps(doc))
    m = CostModel.from_json(cal)
    shares = m.host_costs(g)
    assert sorted(shares) == ["host_kv_lens", "host_positions", "host_query_start", "host_slots"]
    assert set(shares.values()) == {10.0}
    # a composite's time goes to its members' ops
    both = CostModel.from_dict({"host_family": {"spec_verify_head_update": 60.0}}).host_costs(g)
    assert len(both) == 6 and sum(both.values()) == pytest.approx(60.0)
    for bad, match in [
        ({"measured": [1]}, "'measured' must be an object"),
        ({"host_family": {"warp_drive": 1}}, "kernel families"),
        ({"samples": {}}, "unknown cost keys"),
        ({"issue": {"warp_drive": 1}}, "unknown op kinds"),
    ]:
        cal.write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=match):
            CostModel.from_json(cal)
    with pytest.raises(ValueError, match="JSON object"):
        CostModel.from_dict([1])
