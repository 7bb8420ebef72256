"""``specgen plan`` and ``specgen doctor`` on the command line (their home is tests/cli/)."""

import json

import pytest

from specgen.cli import main


def test_cli_plan_json(capsys):
    assert main(["plan", "--boundary", "draft-to-verify", "--width", "4", "--batch", "8", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for side in ("before", "after"):
        for key in (
            "host_syncs_on_critical_path",
            "host_calls_after_final_draft",
            "h2d_copies_on_critical_path",
            "predicted_bubble_us",
            "graph_ops",
            "kernel_families",
        ):
            assert key in data[side]
    fam = data["after"]["kernel_families"][0]
    assert set(fam) >= {"family", "width", "block_table_width", "block_size"}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["plan", "--boundary", "nope"], "unknown boundary"),
        (["plan", "--boundary", "context-kv", "--width", "17"], "width 17"),
        (["plan", "--boundary", "context-kv", "--width", "1"], "width 1"),
        (["plan", "--boundary", "context-kv", "--batch", "0"], "batch 0"),
        (["plan", "--boundary", "context-kv", "--pipeline", "hoist,bogus"], "unknown pass"),
        (["plan", "--boundary", "context-kv", "--width", "four"], "invalid int"),
        (["plan"], "required"),
    ],
)
def test_cli_bad_input_is_one_line_and_status_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_doctor_reports_targets_and_missing_kernels(capsys, tmp_path):
    assert main(["doctor", "--kernels", str(tmp_path / "none")]) == 1
    out = capsys.readouterr().out
    assert "target c:" in out and "target cuda:" in out and "not loadable" in out


def _bench(tmp_path, runs):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"layout": {"block_size": 16, "block_table_width": 32}, "runs": runs}))
    return path


def _run(mode, batch=1, **figs):
    return {
        "mode": mode,
        "depth": 3,
        "width": 4,
        "batch": batch,
        "tpot_ms": 2.0,
        "draft_us": 900.0,
        "bare_verify_us": 4000.0,
        **figs,
    }


def test_compare_predicted_with_measured_before_and_after_calibration(tmp_path, capsys):
    """Each mode's pipeline predicts its bubble; a calibration moves what it measured and nothing else."""
    from specgen.passes import DEFAULT_PIPELINE, CostModel, bubble_us, build_boundary, run_pipeline

    bench = _bench(
        tmp_path,
        [
            _run("baseline", draft_to_verify_us=400.0, kernel_draft_to_verify_us=None),
            _run(
                "specgen",
                draft_to_verify_us=56.5,
                kernel_draft_to_verify_us=19.3,
                verify_to_draft_us=3.0,
                kernel_verify_to_draft_us=12.9,
            ),
            _run("compile"),
            _run("inductor"),
            _run("turbo"),
            {**_run("specgen"), "error": "x"},
        ],
    )
    assert main(["plan", "--compare", str(bench)]) == 0
    out = capsys.readouterr().out
    doc = json.loads((tmp_path / "compare.json").read_text())
    rows = {(r["boundary"], r["mode"]): r for r in doc["rows"]}
    assert len(doc["rows"]) == 8 and ("draft-to-verify", "turbo") not in rows  # no model for unknown modes
    before = build_boundary(
        "draft-to-verify", width=4, batch=1, block_size=16, block_table_width=32, draft_us=300.0, forward_us=4000.0
    )
    after, _ = run_pipeline(before, DEFAULT_PIPELINE)
    assert rows["draft-to-verify", "baseline"]["predicted_default_us"] == round(bubble_us(before), 2)
    assert rows["draft-to-verify", "specgen"]["predicted_default_us"] == round(bubble_us(after), 2)
    assert rows["draft-to-verify", "specgen"]["measured_kernel_us"] == 19.3
    # compile reads the step back before the next draft: its verify-to-draft waits for a host sync
    v2d = {m: rows["verify-to-draft", m]["predicted_default_us"] for m in ("compile", "specgen", "baseline")}
    assert v2d["specgen"] < v2d["compile"] < v2d["baseline"]
    assert "| draft-to-verify | baseline | 3 | 1 | 224 | needs a trace | - | 224 | 400 | needs a trace |" in out
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"run": {"host_sync": 500.0}, "by_batch": {"1": {"run": {"host_sync": 100.0}}}}))
    assert main(["plan", "--compare", str(bench), "--costs", str(costs), "--format", "json"]) == 0
    cal = {(r["boundary"], r["mode"]): r for r in json.loads(capsys.readouterr().out)["rows"]}
    base = cal["draft-to-verify", "baseline"]
    assert base["predicted_calibrated_us"] == pytest.approx(base["predicted_default_us"] + 90.0)  # batch 1's own
    assert (
        cal["draft-to-verify", "specgen"]["predicted_calibrated_us"]
        == cal["draft-to-verify", "specgen"]["predicted_default_us"]
    )  # no host sync left on its path
    assert bubble_us(before, CostModel.from_dict({"run": {"host_sync": 100.0}})) == pytest.approx(
        base["predicted_calibrated_us"], abs=0.01
    )


def test_compare_the_recorded_h200_bench(tmp_path, capsys):
    from pathlib import Path

    import specgen

    run = Path(specgen.__file__).parent / "benchmarks/results/performance/qwen3-0.6b"
    bench, costs = run / "bench.json", run / "costs.json"
    for extra in ([], ["--costs", str(costs)]):
        out = tmp_path / "c.json"
        assert main(["plan", "--compare", str(bench), "--compare-json", str(out), *extra]) == 0
        rows = json.loads(out.read_text())["rows"]
        recorded = {(r["mode"], r["depth"], r["batch"]): r for r in json.loads(bench.read_text())["runs"]}
        assert len(rows) == 2 * len(recorded)
        for r in rows:
            key = "draft_to_verify_us" if r["boundary"] == "draft-to-verify" else "verify_to_draft_us"
            assert r["measured_events_us"] == recorded[r["mode"], r["depth"], r["batch"]][key]
            assert (r["predicted_calibrated_us"] is None) == (not extra)


@pytest.mark.parametrize(
    "make, extra, message",
    [
        (lambda p: p / "none.json", [], "--compare"),
        (lambda p: (p / "x.json").write_text("[1]") and p / "x.json", [], "not a bench.json"),
        (lambda p: (p / "x.json").write_text('{"runs": []}') and p / "x.json", [], "no finished run"),
        (lambda p: _bench(p, [_run("specgen")]), ["--costs", "{tmp}/none.json"], "--costs"),
        (lambda p: _bench(p, [_run("specgen")]), ["--compare-json", "/proc/x/y.json"], "--compare-json"),
    ],
)
def test_compare_bad_input_is_one_line(make, extra, message, tmp_path, capsys):
    path = make(tmp_path)
    argv = ["plan", "--compare", str(path), *(a.format(tmp=tmp_path) for a in extra)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
