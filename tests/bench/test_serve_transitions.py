"""The device idle at the serving loop's batch transitions (bench/serve_transitions.py), on synthetic traces."""

from __future__ import annotations

import pytest

from specgen.bench.serve_transitions import TransitionProfiler, kind_of, summarize_idle, transition_idle
from specgen.engine.serving.results import StepRecord


def _range(name: str, ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": "user_annotation", "name": name, "ts": ts, "dur": dur}


def _launch(ts: float, corr: int) -> dict:
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaGraphLaunch",
        "ts": ts,
        "dur": 2,
        "args": {"correlation": corr},
    }


def _kernel(ts: float, dur: float, corr: int, name: str = "k") -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "args": {"correlation": corr, "stream": 7}}


def _step(step: int, batch: int, **kw) -> StepRecord:
    return StepRecord(t=0.0, batch=batch, fast_path=True, host_syncs=0, step=step, **kw)


def test_idle_is_the_uncovered_gap_between_consecutive_steps():
    events = [
        _range("specgen::serve#3", 0, 100),
        _launch(10, 1),
        _kernel(200, 50, 1),  # step 3 ends on the device at 250
        _range("specgen::prefill#4", 110, 10),
        _launch(112, 3),
        _kernel(252, 4, 3),  # a prefill kernel inside the gap: busy, not idle
        _range("specgen::serve#4", 120, 60),
        _launch(130, 2),
        _kernel(260, 40, 2),  # step 4 starts at 260: a 10 us gap, 4 us of it covered
        _range("specgen::serve#5", 190, 20),
        _launch(195, 4),
        _kernel(300, 30, 4),  # back to back with step 4: no idle
        _kernel(305, 1, 99),  # a record no range launched: ignored
    ]
    steps = [_step(3, 2), _step(4, 3, joined=1, remaps=1), _step(5, 2)]
    gaps = transition_idle(events, steps)
    assert [(g["step"], g["kind"], g["idle_us"]) for g in gaps] == [(4, "join", 6.0), (5, "leave", 0.0)]
    # right before step 4: from the prefill kernel's end (256) to 260; the other 2 us lie before that kernel
    assert [g["before_us"] for g in gaps] == [4.0, 0.0]
    assert gaps[0]["prev_batch"] == 2 and gaps[0]["batch"] == 3


def test_a_step_without_device_records_is_skipped():
    events = [_range("specgen::serve#1", 0, 10), _launch(1, 1), _kernel(20, 5, 1), _range("specgen::serve#2", 12, 5)]
    assert transition_idle(events, [_step(1, 1), _step(2, 1)]) == []


@pytest.mark.parametrize(
    ("before", "after", "kind"),
    [
        (_step(1, 4, bucket=4), _step(2, 3, bucket=4), "leave"),
        (_step(1, 4, bucket=4), _step(2, 5, bucket=8, joined=1), "bucket"),
        (_step(1, 4), _step(2, 4, joined=1, remaps=1), "join"),
        (_step(1, 4), _step(2, 4, remaps=1), "reorder"),
        (_step(1, 4), _step(2, 4), "steady"),
    ],
)
def test_kinds(before, after, kind):
    assert kind_of(after, before) == kind


def test_summary_gives_each_kind_against_the_steady_median():
    gaps = [{"kind": "steady", "idle_us": x} for x in (1.0, 2.0, 3.0)]
    gaps += [{"kind": "join", "idle_us": x, "before_us": x / 2} for x in (10.0, 14.0)]
    s = summarize_idle(gaps)
    assert s["join"]["before_p50_us"] == 6.0 and "before_p50_us" not in s["steady"]
    assert s["steady"]["p50_us"] == 2.0 and s["steady"]["added_us"] is None and s["steady"]["n"] == 3
    assert s["join"]["p50_us"] == 12.0 and s["join"]["added_us"] == 10.0 and s["join"]["max_us"] == 14.0
    assert "leave" not in s


def test_profiler_window_arguments_are_checked():
    with pytest.raises(ValueError, match="two decode steps"):
        TransitionProfiler(start=0, count=1)


def test_device_time_splits_the_window_by_phase():
    """Busy time per phase (overlapping records of one range counted once), the median per range, and the
    window's idle: what no record of any range covered."""
    from specgen.bench.serve_transitions import device_time

    events = [
        _range("specgen::serve#3", 0, 100),
        _launch(10, 1),
        _launch(12, 5),
        _kernel(200, 50, 1),
        _kernel(220, 50, 5),  # overlaps the first: step 3 is busy 200..270
        _range("specgen::prefill#4", 110, 10),
        _launch(112, 3),
        _kernel(280, 20, 3),  # 10 us idle before it
        _range("specgen::serve#4", 120, 60),
        _launch(130, 2),
        _kernel(300, 10, 2),
    ]
    dt = device_time(events)
    assert dt["serve"] == {"ranges": 2, "busy_us": 80.0, "p50_us": 40.0}
    assert dt["prefill"] == {"ranges": 1, "busy_us": 20.0, "p50_us": 20.0}
    assert dt["window_us"] == 110.0 and dt["idle_us"] == 10.0
    assert device_time([_range("specgen::serve#1", 0, 10)]) is None  # no device record


def test_the_report_line_gives_the_idle_by_kind_and_the_window_by_phase():
    from specgen.bench.serve_report import transition_line

    run = {
        "mode": "specgen",
        "load": "8/s",
        "transition_idle": {
            "summary": summarize_idle([{"kind": "steady", "idle_us": 0.0}, {"kind": "join", "idle_us": 4.0}]),
            "device_time": {
                "serve": {"ranges": 2, "busy_us": 8000.0, "p50_us": 4000.0},
                "prefill": {"ranges": 1, "busy_us": 1000.0, "p50_us": 1000.0},
                "window_us": 10000.0,
                "idle_us": 1000.0,
            },
        },
    }
    line = transition_line(run)
    assert line.startswith("device idle before a step (specgen at 8/s, profiled run): steady 0.0 us (n=1); join 4.0")
    assert "window (10.0 ms): decode steps 80% (2, median 4.00 ms each), prefill chunks 10% (1)" in line
    assert line.endswith("idle 10%")
    del run["transition_idle"]["device_time"]
    assert "\n" not in transition_line(run)  # a run recorded before the split: the idle line alone


def test_idle_is_split_by_what_lies_on_either_side():
    events = [
        _range("specgen::serve#3", 0, 100),
        _launch(10, 1),
        _kernel(200, 50, 1),  # step 3 ends at 250
        _range("specgen::prefill#4", 110, 10),
        _launch(112, 3),
        _kernel(270, 10, 3),  # 20 us after step 3: the chunk launched late
        _launch(114, 5),
        _kernel(283, 7, 5),  # 3 us among the chunk's own kernels
        _range("specgen::serve#4", 120, 60),
        _launch(130, 2),
        _kernel(291, 40, 2),  # 1 us before the step
    ]
    gaps = transition_idle(events, [_step(3, 3), _step(4, 2)])
    (g,) = gaps
    assert g["kind"] == "leave" and g["idle_us"] == 24.0 and g["before_us"] == 1.0
    assert g["prefills"] == 1 and g["holes"] == 3
    assert g["between"] == {"serve>prefill": 20.0, "prefill>prefill": 3.0, "prefill>serve": 1.0}
    assert g["outside_us"] == 21.0  # the 3 us among the chunk's own kernels are the chunk's
    s = summarize_idle(gaps)["leave"]
    assert s["outside_p50_us"] == s["outside_max_us"] == 21.0
    assert summarize_idle(gaps + gaps)["leave"]["between_us"] == {
        "serve>prefill": 40.0,
        "prefill>prefill": 6.0,
        "prefill>serve": 2.0,
    }


def test_the_report_line_says_what_lies_on_either_side_of_a_transitions_idle():
    from specgen.bench.serve_report import transition_line

    gaps = [
        {"kind": "steady", "idle_us": 0.0, "between": {}},
        {"kind": "leave", "idle_us": 500.0, "between": {"serve>prefill": 400.0, "prefill>serve": 100.0}},
    ]
    gaps[1]["outside_us"] = 2.0
    line = transition_line({"mode": "specgen", "load": "48/s", "transition_idle": {"summary": summarize_idle(gaps)}})
    assert "leave 500.0 us (n=1, +500.0, 2.0 outside the chunks (max 2.0))" in line
    assert line.endswith("on either side (total): leave prefill>serve 0.10 ms, serve>prefill 0.40 ms")


def test_a_window_of_the_size_a_saturated_run_profiles_is_split_at_once():
    """100 decode steps of 30 kernels and a prefill of 1000 kernels before every third (74k events, as 100
    profiled steps at 48/s give): every gap split exactly, and in well under a minute (the split walks the
    merged records once per gap; a scan of every record per idle hole took longer than the run)."""
    import time

    events, corr, t, steps = [], 0, 0.0, []
    for step in range(100):
        if step % 3 == 0:  # 1000 kernels of 2 us, 1 us apart, the first 1010 us after the step before ends
            events.append(_range(f"specgen::prefill#{step}", t, 500))
            for i in range(1000):
                corr += 1
                events += [_launch(t + i * 0.4, corr), _kernel(t + 1000 + i * 3, 2, corr)]
            t += 4000
        events.append(_range(f"specgen::serve#{step}", t, 50))
        for i in range(30):
            corr += 1
            events += [_launch(t + i, corr), _kernel(t + 1000 + i * 300, 290, corr)]
        t += 10000
        steps.append(_step(step, 32 - (step % 3 == 0)))
    began = time.perf_counter()
    gaps = transition_idle(events, steps)
    assert time.perf_counter() - began < 30
    assert len(gaps) == 99
    leave = {"idle_us": 3010.0, "before_us": 1001.0, "outside_us": 2011.0, "prefills": 1, "holes": 1001}
    want = {"serve>prefill": 1010.0, "prefill>prefill": 999.0, "prefill>serve": 1001.0}
    for g in gaps:
        if g["step"] % 3 == 0:  # after a prefill
            assert {k: g[k] for k in leave} == leave and g["between"] == want and g["kind"] == "leave"
        else:  # 1010 us between two steps' kernels
            assert (g["idle_us"], g["before_us"], g["outside_us"], g["holes"]) == (1010.0, 1010.0, 1010.0, 1)
            assert g["between"] == {"serve>serve": 1010.0} and g["prefills"] == 0 and g["kind"] == "steady"


def test_marks_give_each_ranges_extent_and_the_idle_outside_them():
    """On the CPU the marks are the host's clock: every prefill and decode range of a served run has an
    extent, in order; the gaps from them carry no idle inside a range (one interval each)."""
    from specgen.bench.serve_transitions import transition_idle_marks
    from specgen.engine.profiling import DeviceMarks, phase_range

    with DeviceMarks("cpu") as marks:
        with pytest.raises(RuntimeError, match="already"):
            DeviceMarks("cpu").__enter__()
        for step in range(4):
            if step == 2:
                for _ in range(2):  # an iteration's two chunks: two ranges of one name
                    with phase_range("prefill", step):
                        pass
            with phase_range("serve", step):
                pass
    with phase_range("serve", 9):  # not taken: no mark
        pass
    ext = marks.extents()
    want = [("serve", 0), ("serve", 1), ("prefill", 2), ("prefill", 2), ("serve", 2), ("serve", 3)]
    assert [(phase, k) for phase, k, _, _ in ext] == want
    spans = [(s, e) for _, _, s, e in ext]
    assert all(s <= e for s, e in spans) and all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    gaps = transition_idle_marks(ext, [_step(0, 2), _step(1, 2), _step(2, 1), _step(3, 1)])
    want = [(1, "steady", 0), (2, "leave", 2), (3, "steady", 0)]
    assert [(g["step"], g["kind"], g["prefills"]) for g in gaps] == want
    for g in gaps:
        assert g["idle_us"] == g["outside_us"] >= 0 and g["holes"] <= g["prefills"] + 1


def test_marks_from_known_extents():
    from specgen.bench.serve_transitions import transition_idle_marks

    ext = [("serve", 1, 0.0, 100.0), ("prefill", 2, 130.0, 400.0), ("serve", 2, 404.0, 500.0)]
    (g,) = transition_idle_marks(ext, [_step(1, 3), _step(2, 2)])
    assert (g["idle_us"], g["before_us"], g["outside_us"], g["holes"]) == (34.0, 4.0, 34.0, 2)
    assert g["between"] == {"serve>prefill": 30.0, "prefill>serve": 4.0}


def test_an_iterations_chunks_are_each_their_own_range():
    """Two prefill chunks of one iteration share a range name: each keeps its own extent, so neither the first
    chunk's work counts as idle nor the host's lateness between the two as a chunk's own."""
    from specgen.bench.serve_transitions import device_time, transition_idle_marks

    ext = [
        ("serve", 1, 0.0, 100.0),
        ("prefill", 2, 102.0, 300.0),  # the first chunk
        ("prefill", 2, 340.0, 400.0),  # the second, 40 us late
        ("serve", 2, 401.0, 500.0),
    ]
    (g,) = transition_idle_marks(ext, [_step(1, 3), _step(2, 2)])
    assert (g["idle_us"], g["outside_us"], g["before_us"], g["prefills"]) == (43.0, 43.0, 1.0, 2)
    assert g["between"] == {"serve>prefill": 2.0, "prefill>prefill": 40.0, "prefill>serve": 1.0}
    events = [
        _range("specgen::serve#1", 0, 20),
        _launch(5, 1),
        _kernel(30, 70, 1),  # step 1: 30..100
        _range("specgen::prefill#2", 25, 10),
        _launch(27, 2),
        _kernel(102, 90, 2),  # chunk one: 102..192
        _launch(29, 3),
        _kernel(193, 107, 3),  # ..300, 1 us among its own kernels
        _range("specgen::prefill#2", 60, 10),
        _launch(62, 4),
        _kernel(340, 60, 4),  # chunk two, 40 us after chunk one
        _range("specgen::serve#2", 80, 10),
        _launch(85, 5),
        _kernel(401, 99, 5),
    ]
    (g,) = transition_idle(events, [_step(1, 3), _step(2, 2)])
    assert (g["idle_us"], g["outside_us"], g["prefills"]) == (44.0, 43.0, 2)
    assert device_time(events)["prefill"]["ranges"] == 2


def test_the_picture_plots_each_transitions_own_idle_beside_all_of_it(tmp_path):
    pytest.importorskip("matplotlib")
    from specgen.bench.serve_report import plot_transition_idle, transition_points

    gaps = [
        {"kind": "leave", "idle_us": 430.0, "outside_us": 6.0},  # most of it between a prefill chunk's own kernels
        {"kind": "leave", "idle_us": 3.0, "outside_us": 3.0},
        {"kind": "join", "idle_us": 2.0},  # recorded before the split: all of it is its own
    ]
    assert transition_points(gaps, "leave") == ([430.0, 3.0], [6.0, 3.0])
    assert transition_points(gaps, "join") == ([2.0], [2.0])
    assert transition_points(gaps, "bucket") == ([], [])
    runs = [{"mode": m, "load": "48/s", "transition_idle": {"gaps": gaps}} for m in ("baseline", "specgen")]
    png = plot_transition_idle({"runs": runs}, tmp_path / "transition_idle.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_transition_idle({"runs": [{"mode": "specgen", "load": "8/s"}]}, tmp_path / "none.png") is None
    # the timing-event run alone (no profile) still draws, and both make two rows
    marks = [{"mode": "specgen", "load": "48/s", "transition_idle_marks": {"gaps": gaps}}]
    assert plot_transition_idle({"runs": marks}, tmp_path / "marks.png").stat().st_size > 0
    both = [{**runs[1], "transition_idle_marks": {"gaps": gaps}}, runs[0]]
    assert plot_transition_idle({"runs": both}, tmp_path / "both.png").stat().st_size > 0
