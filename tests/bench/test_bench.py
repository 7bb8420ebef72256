"""The bench harness and ``specgen bench``: configuration errors, a CPU run end to end, the report."""

from __future__ import annotations

import json

import pytest

ENGINE_LAYOUT = {
    "widths": (2, 3, 4, 5, 6),
    "block_table_width": 8,
    "block_size": 16,
}  # as conftest.engine_kernels builds
BT = ENGINE_LAYOUT["block_table_width"]


@pytest.mark.slow
def test_bench_cli_on_cpu(engine_kernels, tmp_path, capsys, monkeypatch):
    from specgen.cli import main

    monkeypatch.setenv("SPECGEN_SKINNY_TALL", "0")
    monkeypatch.setenv("SPECGEN_TEST_UNRELATED", "x")

    out = tmp_path / "bench"
    rc = main(
        [
            "bench",
            "--model",
            "tiny",
            "--steps",
            "4",
            "--warmup",
            "1",
            "--depth",
            "2,3",
            "--batch",
            "1,2",
            "--kernels",
            str(engine_kernels.root),
            "--block-table-width",
            str(BT),
            "--prompt-len",
            "8",
            "--check",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    text = capsys.readouterr()
    assert "compile: needs CUDA" in text.out + text.err and "inductor: needs CUDA" in text.out + text.err
    assert "on the CPU there are no kernels" in text.out
    result = json.loads((out / "bench.json").read_text())
    assert result["command"] == (
        "specgen bench --model tiny --steps 4 --warmup 1 --depth 2,3 --batch 1,2 --kernels "
        f"{engine_kernels.root} --block-table-width {BT} --prompt-len 8 --check --out {out}"
    )
    assert result["aborted"] is None and "garbage collection" in result["settled"]
    switches = result["environment"]["switches"]  # the SPECGEN_* switches the run saw, not the test suite's
    assert switches["SPECGEN_SKINNY_TALL"] == "0" and not any(k.startswith("SPECGEN_TEST_") for k in switches)
    assert {(r["depth"], r["batch"], r["mode"]) for r in result["runs"]} == {
        (d, b, m) for d in (2, 3) for b in (1, 2) for m in ("baseline", "specgen")
    }
    for r in result["runs"]:
        assert r["equals_greedy"] and r["modes_agree"]
        assert r["tpot_ms"] > 0 and r["steps"] == 4 and r["draft_us"] > 0
        assert isinstance(r["capture_s"], float) and r["capture_s"] >= 0  # the CPU captures nothing: ~0 s
        assert r["kernel_draft_to_verify_us"] is r["head_us"] is r["kernel_verify_to_draft_us"] is None
    assert [(r["depth"], r["batch"]) for r in result["ratios"]] == [(2, 1), (2, 2), (3, 1), (3, 2)]
    png = out / "timeline.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["bench", "--replot", str(out / "bench.json")]) == 0


def test_bench_cli_errors(capsys):
    from specgen.cli import main

    assert main(["bench", "--modes", "baseline,turbo", "--device", "cpu"]) == 2
    assert "unknown mode 'turbo'" in capsys.readouterr().err
    assert main(["bench", "--acceptance", "2", "--device", "cpu"]) == 2
    assert (
        main(
            [
                "bench",
                "--steps",
                "200",
                "--depth",
                "5",
                "--block-table-width",
                "4",
                "--device",
                "cpu",
                "--modes",
                "baseline",
            ]
        )
        == 2
    )
    assert "positions" in capsys.readouterr().err
    assert main(["bench", "--model", "huge"]) == 2
    assert main(["bench", "--warmup", "0", "--device", "cpu"]) == 2
    assert "--warmup must be at least 1" in capsys.readouterr().err


@pytest.mark.slow
def test_bench_readme_command_on_cpu(tmp_path, monkeypatch, capsys):
    """`specgen bench --model tiny --steps 8` from a bare folder: builds its kernels, runs, writes its files."""
    from specgen.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["bench", "--model", "tiny", "--steps", "8"]) == 0
    out = capsys.readouterr()
    assert "depth 3 B=1: specgen TPOT vs baseline" in out.out
    assert "compile: needs CUDA" in out.err
    result = json.loads((tmp_path / "bench_results" / "bench.json").read_text())
    assert [r["mode"] for r in result["runs"]] == ["baseline", "specgen"]
    assert result["runs"][1]["runtime_stats"]["fallback"] == {}
    assert (tmp_path / "build" / "bench_kernels" / "manifest.json").exists()


def test_configure_derives_a_frozen_config():
    import dataclasses

    from specgen.bench.harness import BenchError, configure
    from specgen.engine import MODES

    c = configure(
        depths=(3, 5),
        batches=(1, 2),
        modes=("baseline", "compile"),
        steps=4,
        warmup=1,
        device="cpu",
        block_table_width=0,
        command="specgen bench --depth 3,5",
    )
    assert c.modes == ("baseline",) and dict(c.skipped) == {"compile": MODES["compile"].cpu_skip_reason}
    assert c.widths == (4, 6) and c.kernel_target == "c" and not c.needs_library
    # the table holds the longer of the timed and the profiled runs (the CPU profiles its host-serial runs too)
    need = 32 + (1 + max(4, c.profile_steps) + 2) * 6 + 1
    assert c.block_table_width * c.block_size >= need > (c.block_table_width - 1) * c.block_size
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.steps = 8
    with pytest.raises(BenchError, match="unknown mode 'turbo'"):
        configure(modes=("turbo",), device="cpu")


def test_ratios_compare_specgen_with_every_other_registered_mode():
    from specgen.bench.harness import ratios

    runs = [
        {"depth": 3, "batch": 1, "mode": m, "tpot_ms": t}
        for m, t in (("compile", 2.0), ("specgen", 1.0), ("baseline", 4.0), ("inductor", 1.25))
    ]
    runs.append({"depth": 3, "batch": 2, "mode": "specgen", "error": "boom"})
    assert ratios(runs) == [
        {"depth": 3, "batch": 1, "tpot_vs_baseline": -0.75, "tpot_vs_compile": -0.5, "tpot_vs_inductor": -0.2}
    ]


def test_summary_splits_a_fused_step_at_the_bare_draft():
    """A mode that runs the draft in its step graph has no event between draft and verify: the row takes the
    bare draft as its draft and the rest of the step's span as the verify span."""
    from specgen.bench.harness import summary
    from specgen.engine.results import RunResult, StepTiming

    def run(fused):
        res = RunResult("specgen", 4, 1, [[1]], steps=3, timed_tokens=6, elapsed_s=0.003, fused_draft=fused)
        res.timings = [StepTiming(d, v, 5.0, 0) for d, v in ((0.5, 600.0), (0.5, 610.0), (0.5, 620.0))]
        return summary(res, (400.0, 180.0))

    fused, split = run(True), run(False)
    assert fused["draft_split"] == "bare draft" and "draft_split" not in split
    assert fused["draft_us"] == 400.0 and fused["verify_span_us"] == pytest.approx(210.5)
    assert fused["draft_to_verify_us"] == pytest.approx(30.5)
    assert split["draft_us"] == 0.5 and split["draft_to_verify_us"] == pytest.approx(430.0)


def test_a_measured_run_starts_settled_and_collects_nothing_while_it_runs():
    """``settled``: the garbage an earlier run left is collected before the run, none is collected during it
    (a collection between two replays is a host pause in a boundary), and the collector comes back as it was."""
    import gc
    import weakref

    from specgen.bench.support import settled

    class Node:
        pass

    def cycle():
        a, b = Node(), Node()
        a.other, b.other = b, a
        return weakref.ref(a)

    left = cycle()  # unreachable, but only the collector frees a cycle
    assert gc.isenabled() and left() is not None
    with settled(cuda=False):
        assert left() is None  # collected on entry
        assert not gc.isenabled()
        during = [cycle() for _ in range(2000)]  # enough allocations to trigger a collection, were it enabled
        assert all(r() is not None for r in during)
    assert gc.isenabled()
    gc.disable()
    try:
        with settled(cuda=False):
            pass
        assert not gc.isenabled()  # a caller's disabled collector stays disabled
    finally:
        gc.enable()


def test_fold_rounds_keeps_the_median_run_and_lists_every_round():
    from specgen.bench.harness import fold_rounds

    rows = [
        {"mode": m, "depth": 3, "batch": 1, "round": r, "position": p, "tpot_ms": t, "step_us": t * 1000}
        for r, p, m, t in (
            (0, 0, "baseline", 4.0),
            (0, 1, "specgen", 1.2),
            (1, 0, "specgen", 1.0),
            (1, 1, "baseline", 3.0),
            (2, 0, "baseline", 5.0),
            (2, 1, "specgen", 1.1),
            (3, 0, "specgen", 0.9),
        )
    ]
    rows.append({"mode": "baseline", "depth": 3, "batch": 1, "round": 3, "position": 1, "error": "boom"})
    base, spec = fold_rounds(rows, ("baseline", "specgen", "inductor"))
    assert base["mode"] == "baseline" and base["tpot_ms"] == 4.0 and base["round"] == 0  # the failed round is not timed
    assert [x["round"] for x in base["rounds"]] == [0, 1, 2, 3] and base["rounds"][3] == {
        "round": 3,
        "position": 1,
        "error": "boom",
    }
    assert base["tpot_spread"] == pytest.approx((5.0 - 3.0) / 4.0)
    assert spec["tpot_ms"] == 1.0 and spec["round"] == 1  # the lower median of four: 0.9, 1.0, 1.1, 1.2
    failed = fold_rounds([{"mode": "specgen", "round": 0, "position": 0, "error": "x"}], ("specgen",))
    assert failed[0]["error"] == "x" and "tpot_spread" not in failed[0]


@pytest.mark.slow
def test_repeats_rotate_the_modes_and_fold_to_one_row_each(engine_kernels, tmp_path, capsys):
    from specgen.cli import main

    out = tmp_path / "bench"
    args = ["bench", "--model", "tiny", "--steps", "3", "--warmup", "1", "--depth", "2", "--batch", "1"]
    args += ["--kernels", str(engine_kernels.root), "--block-table-width", str(BT), "--prompt-len", "8"]
    assert main([*args, "--repeats", "3", "--profile-steps", "0", "--out", str(out)]) == 0
    text = capsys.readouterr()
    assert "[6/6] depth 2 batch 1" in text.err and "--repeats" in text.out
    result = json.loads((out / "bench.json").read_text())
    assert result["repeats"] == 3 and [r["mode"] for r in result["runs"]] == ["baseline", "specgen"]
    for r in result["runs"]:
        assert [x["round"] for x in r["rounds"]] == [0, 1, 2] and r["modes_agree"]
        times = sorted(x["tpot_ms"] for x in r["rounds"])
        assert r["tpot_ms"] == times[1] and r["tpot_spread"] >= 0
    # round r starts at mode r: each mode runs first and last
    positions = {r["mode"]: [x["position"] for x in r["rounds"]] for r in result["runs"]}
    assert positions == {"baseline": [0, 1, 0], "specgen": [1, 0, 1]}
    assert main([*args, "--repeats", "0", "--out", str(out)]) == 2
    assert "--repeats must be at least 1" in capsys.readouterr().err
