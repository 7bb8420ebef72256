"""benchmarks/graph_shapes.py: the gaps inside graph launches and the switches between steps, from device records;
the measurement itself on a CUDA device."""

from __future__ import annotations

import json

import pytest

from specgen.bench.trace_records import DeviceRecord
from tests.oracles.scripts import benchmark_module

gs = benchmark_module("graph_shapes")


def _launch(corr: int, t0: float, durs, gaps) -> list[DeviceRecord]:
    """Kernels of one launch: kernel i starts ``gaps[i]`` us after kernel i - 1 ends."""
    out, t = [], t0
    for i, d in enumerate(durs):
        t += gaps[i] if i else 0.0
        out.append(DeviceRecord(f"k{i}", "kernel", t, t + d, corr, 7))
        t += d
    return out


def test_replay_gaps_counts_a_side_stream_as_busy():
    recs = _launch(1, 0.0, [1.0] * 5, [0, 10.0, 0.5, 0.5, 3.0])
    recs.append(DeviceRecord("side", "kernel", 1.5, 8.0, 1, 9))  # a side-stream kernel covers 7 us of the stall
    recs += _launch(2, 40.0, [1.0] * 3, [0, 0.4, 0.4])
    out = gs.replay_gaps(recs, min_gap=2.0)
    assert [o["kernels"] for o in out] == [6, 3]
    assert out[0]["gaps"] == [(2, pytest.approx(3.0)), (5, pytest.approx(3.0))]  # in start order, the side is 1
    assert out[0]["end"] == pytest.approx(19.0) and out[1]["gaps"] == []


def test_replay_gaps_measures_from_the_latest_end_of_every_earlier_record():
    recs = _launch(1, 0.0, [1.0, 1.0, 1.0], [0, 10.0, 2.5])
    out = gs.replay_gaps(recs, min_gap=2.0)
    assert out[0]["gaps"] == [(1, 10.0), (2, 2.5)]
    assert gs.replay_gaps(recs, min_gap=5.0)[0]["gaps"] == [(1, 10.0)]


def test_summarize_prices_the_switch_and_the_second_graph_of_a_split_step():
    recs, t = [], 0.0
    for step in range(4):  # a draft graph (2 kernels), 1.5 us, a step graph (3 kernels, 9 us stall at index 1)
        recs += _launch(10 * step, t, [1.0, 1.0], [0, 0.4])
        recs += _launch(10 * step + 1, t + 3.9, [1.0, 1.0, 1.0], [0, 9.0, 0.4])
        t += 3.9 + 12.4 + 4.0  # the next step's first kernel 4 us after this one's last
    one = gs.summarize(gs.replay_gaps(recs), per_step=2)
    assert one["switch_us"] == pytest.approx(4.0)
    assert one["span_us"] == pytest.approx(16.3)
    assert one["gaps_us"] == {"1:0": pytest.approx(1.5), "1:1": pytest.approx(9.0)}
    json.dumps(one)  # what the script writes


def test_summarize_keeps_only_gaps_seen_in_half_the_steps():
    recs, t = [], 0.0
    for step in range(4):
        recs += _launch(step, t, [1.0] * 3, [0, 0.4, 6.0 if step == 0 else 0.4])
        t += 20.0
    assert gs.summarize(gs.replay_gaps(recs))["gaps_us"] == {}


def test_the_script_refuses_unknown_shapes(monkeypatch, tmp_path):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(SystemExit):
        gs.main(["--out", str(tmp_path / "x.json"), "--shapes", "chain,spiral"])


@pytest.mark.gpu
def test_cuda_graph_shapes_measure_every_shape(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    out = tmp_path / "shapes.json"
    assert gs.main(["--out", str(out), "--kernels", "40", "--steps", "20", "--repeats", "2", "--profiled", "6"]) == 0
    res = json.loads(out.read_text())["shapes"]
    assert set(res) == set(gs.SHAPES)
    for r in res.values():
        assert r["step_us"] > 0 and r["span_us"] > 0 and r["switch_us"] is not None
    assert res["chain_split"]["gaps_us"]["1:0"] >= 0  # the draft graph -> step graph switch, always reported
