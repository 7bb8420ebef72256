"""``specgen plan`` and ``specgen doctor`` on the command line (their home is tests/cli/)."""

import json

import pytest

from specgen.cli import main


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
