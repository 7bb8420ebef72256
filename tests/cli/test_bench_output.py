"""``specgen bench`` as a newcomer meets it: kernels added to a folder, the table explained, notes, progress,
results that are never lost or left stale, and a timeline picture that reads."""

from __future__ import annotations

import json
import shutil
import time

import pytest

from specgen.bench import harness as bench
from specgen.bench import report as bench_report
from specgen.bench.support import still_running
from specgen.cli import main

TINY = [
    "--model",
    "tiny",
    "--steps",
    "4",
    "--warmup",
    "1",
    "--bare-repeats",
    "3",
    "--prompt-len",
    "8",
    "--block-table-width",
    "8",
    "--block-size",
    "16",
    "--device",
    "cpu",
]


def _row(mode, tpot, quarters, acceptance=0.5, depth=3, batch=1, syncs=None):
    return {
        "mode": mode,
        "depth": depth,
        "batch": batch,
        "width": depth + 1,
        "tpot_ms": tpot,
        "tokens_per_s": 1.0,
        "acceptance": acceptance,
        "draft_us": 10.0,
        "draft_to_verify_us": 5.0,
        "bare_verify_us": 20.0,
        "verify_to_draft_us": 3.0,
        "host_syncs_per_step": syncs,
        "step_us_by_quarter": quarters,
    }


def _result(runs, acceptance_p=None):
    return {
        "command": "specgen bench",
        "model": "tiny",
        "environment": {"device": "cpu"},
        "runs": runs,
        "acceptance_p": acceptance_p,
        "skipped_modes": {},
        "ratios": bench.ratios(runs),
    }


@pytest.mark.slow
def test_bench_adds_its_kernels_to_a_bigger_folder_and_explains_its_output(base_build, keys, tmp_path, capsys):
    folder = tmp_path / "kernels"
    shutil.copytree(base_build, folder)
    before = keys(folder)
    out = tmp_path / "results"
    out.mkdir()
    (out / "timeline.png").write_bytes(b"an older picture")
    assert main(["bench", *TINY, "--modes", "baseline,specgen", "--kernels", str(folder), "--out", str(out)]) == 0
    after = keys(folder)
    # the head's three families, the composite, prepare_next_draft, the tail composite, the serving row remap
    # built beside the tail and the device guard's check beside the head; greedy_prefix_verify__w4 was there already
    assert before < after and {f for f, _ in after - before} == {
        "spec_verify_token_update__w4",
        "spec_verify_metadata_update__w4_bt8_bs16",
        "spec_verify_attention_tiling_update__w4_bs16",
        "spec_verify_head_update__w4_bt8_bs16",
        "prepare_next_draft__w4_bt8_bs16",
        "spec_verify_tail_update__w4_bt8_bs16",
        "spec_batch_row_remap__w4_bt8_bs16",
        "spec_verify_guard_check__w4_bt8_bs16",
    }
    cap = capsys.readouterr()
    assert bench_report.LEGEND in cap.out
    assert "note: syncs/step is counted with torch.cuda's sync debug mode" in cap.out
    result = json.loads((out / "bench.json").read_text())
    runs = bench_report.ok_runs(result)
    assert [r["mode"] for r in runs] == ["baseline", "specgen"]
    assert all(len(r["step_us_by_quarter"]) == 3 for r in runs)  # 4 timed steps, the last has no gap
    low = sorted(r["acceptance"] for r in runs)[1] < bench_report.LOW_ACCEPTANCE
    assert ("--acceptance 0.7" in cap.out) == low and result["notes"] == bench_report.notes(result)
    assert (out / "timeline.png").read_bytes()[:4] == b"\x89PNG"
    assert "bench: [1/2] depth 3 batch 1 baseline: TPOT" in cap.err


def test_a_bench_without_a_finished_run_keeps_the_old_results(tmp_path, monkeypatch, capsys):
    out = tmp_path / "results"
    out.mkdir()
    (out / "bench.json").write_text('{"runs": "the last good ones"}')
    (out / "timeline.png").write_bytes(b"the last good picture")
    failed = _result([{"mode": "baseline", "depth": 3, "batch": 1, "width": 4, "error": "RuntimeError: boom"}])
    monkeypatch.setattr(bench, "run_bench", lambda config, library, tp=None, trace_dir=None: failed)
    assert main(["bench", *TINY, "--modes", "baseline", "--out", str(out)]) == 1
    cap = capsys.readouterr()
    assert "failed: RuntimeError: boom" in cap.out and "no run finished" in cap.err
    assert (out / "bench.json").read_text() == '{"runs": "the last good ones"}'
    assert (out / "timeline.png").read_bytes() == b"the last good picture"
    with pytest.raises(bench_report.ResultError):
        bench_report.write(failed, out)


def test_a_picture_that_cannot_be_drawn_is_not_left_stale(tmp_path, monkeypatch, capsys):
    (tmp_path / "timeline.png").write_bytes(b"an older picture")

    def broken(result, path):
        raise RuntimeError("no fonts")

    monkeypatch.setattr(bench_report, "plot", broken)
    paths = bench_report.write(_result([_row("baseline", 1.0, [1.0, 1.0])]), tmp_path)
    assert paths == [tmp_path / "bench.json"] and not (tmp_path / "timeline.png").exists()
    assert "could not draw timeline.png (RuntimeError: no fonts)" in capsys.readouterr().err


@pytest.mark.parametrize(
    "subject, baseline, noisy",
    [
        ([90, 91, 89, 90], [100, 100, 101, 99], False),  # -10 % in every quarter: a real difference
        ([60, 140, 80, 120], [100, 100, 100, 100], True),  # -40 % .. +40 % around 0 %: noise
        ([95, 105], [100, 100], True),  # +-5 % around 0 %
    ],
)
def test_a_noise_warning_when_quarters_disagree_more_than_the_difference(subject, baseline, noisy):
    runs = [_row("baseline", sum(baseline) / 100, baseline), _row("specgen", sum(subject) / 100, subject)]
    notes = bench_report.notes(_result(runs))
    assert any(n.startswith("noisy timing at depth 3 B=1: specgen vs baseline") for n in notes) == noisy


@pytest.mark.parametrize("acceptance, acceptance_p, hint", [(0.03, None, True), (0.6, None, False), (0.03, 0.7, False)])
def test_a_hint_about_acceptance_when_the_drafts_seldom_agree(acceptance, acceptance_p, hint):
    runs = [_row(m, 1.0, [], acceptance=acceptance, syncs=0.0) for m in ("baseline", "specgen")]
    notes = bench_report.notes(_result(runs, acceptance_p))
    assert any("--acceptance 0.7" in n for n in notes) == hint
    assert not any("syncs/step" in n for n in notes)  # counted here, so no note about an empty column


@pytest.mark.parametrize(
    "draft, weights, named",
    [("mtp", None, "the random-weight MTP head"), ("dflash", None, "the random-weight dflash draft"),
     ("dspark", "ckpt/", "the dspark draft seldom")],
)  # fmt: skip
def test_the_acceptance_hint_names_the_draft_that_ran(draft, weights, named):
    runs = [_row(m, 1.0, [], acceptance=0.02, syncs=0.0) for m in ("baseline", "specgen")]
    result = dict(_result(runs, None), draft=draft, draft_weights=weights)
    (hint,) = [n for n in bench_report.notes(result) if "--acceptance 0.7" in n]
    assert named in hint


def test_the_table_legend_and_an_empty_ratio_line(capsys):
    text = bench_report.table(_result([_row("specgen", 1.0, [])]))  # one mode: nothing to compare with
    assert bench_report.LEGEND in text and "TPOT vs" not in text
    head = text.splitlines()[0].split()
    assert head[:3] == ["depth", "B", "mode"] and "d->v" in head and "v->d" in head


@pytest.mark.parametrize("panels", [1, 4])
def test_the_timeline_legend_covers_nothing_and_the_panels_fill_the_picture(panels):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [
        _row(m, 1.0, [], depth=d, batch=b)
        for d, b in [(3, 1), (4, 1), (3, 8), (4, 8)][:panels]
        for m in ("baseline", "specgen", "compile")
    ]
    fig = bench_report.figure(_result(runs))
    try:
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        legend, title = fig.legends[0].get_window_extent(r), fig._suptitle.get_window_extent(r)
        boxes = [ax.get_tightbbox(r) for ax in fig.axes]
        assert not legend.overlaps(title) and not any(legend.overlaps(b) or title.overlaps(b) for b in boxes)
        height = fig.bbox.height
        spans = sorted([(b.y0, b.y1) for b in [legend, title, *boxes]])
        gaps = [lo - prev_hi for (_, prev_hi), (lo, _) in zip(spans, spans[1:])]
        assert max(gaps) < 0.1 * height, "a blank band in the picture"
        assert spans[0][0] < 0.1 * height and spans[-1][1] > 0.9 * height
    finally:
        plt.close(fig)


def test_long_runs_say_they_are_still_running(capsys):
    with still_running("depth 3 batch 1 specgen", every=0.05):
        time.sleep(0.3)
    assert "bench: depth 3 batch 1 specgen: still running, 0s so far" in capsys.readouterr().err


def test_a_gpu_sized_model_on_the_cpu_is_warned_about(monkeypatch, capsys):
    class NoSweep:
        def __init__(self, config, library, tp=None, trace_dir=None):
            pass

        def run(self):
            return {}

    monkeypatch.setattr(bench, "_Sweep", NoSweep)
    bench.run_bench(bench.configure(model="qwen3-0.6b", device="cpu", modes=("baseline",)))
    assert "warning: qwen3-0.6b is sized for a GPU; on the CPU each run takes minutes" in capsys.readouterr().err
    bench.run_bench(bench.configure(model="tiny", device="cpu", modes=("baseline",)))
    assert "warning" not in capsys.readouterr().err
