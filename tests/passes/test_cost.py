"""The cost model: defaults, calibration files."""

import json

import pytest

from specgen.passes import CostModel, build_boundary, bubble_us


def test_cost_calibration_file(tmp_path):
    g = build_boundary("draft-to-verify", width=4, batch=1)
    cal = tmp_path / "c.json"
    cal.write_text(json.dumps({"run": {"host_compute": 100.0}}))
    assert bubble_us(g, CostModel.from_json(cal)) > bubble_us(g) + 100
    cal.write_text(json.dumps({"run": {"warp_drive": 1}}))
    with pytest.raises(ValueError, match="unknown op kinds"):
        CostModel.from_json(cal)
