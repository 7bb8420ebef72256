"""benchmarks/node_gaps.py: the idle beside a graph's memset and memcpy nodes, apart from the rest."""

from __future__ import annotations

import gzip
import json

import pytest

from specgen.bench.trace_records import DeviceRecord
from tests.oracles.scripts import benchmark_module

ng = benchmark_module("node_gaps")


def _launch(corr: int, t0: float, items) -> list[DeviceRecord]:
    """``items``: (cat, gap before it, duration) in order."""
    out, t = [], t0
    for i, (cat, gap, dur) in enumerate(items):
        t += gap
        out.append(DeviceRecord(f"{cat}{i}", cat, t, t + dur, corr, 7))
        t += dur
    return out


STEP = [("kernel", 0, 1.0)] * 3 + [("gpu_memset", 1.5, 1.0), ("kernel", 9.0, 100.0), ("kernel", 0.4, 1.0)]


def test_launch_idle_puts_the_gaps_around_a_memset_beside_it():
    out = ng.launch_idle(_launch(1, 0.0, [("kernel", 0, 1.0), ("kernel", 0.5, 1.0)] + STEP), min_records=2)
    assert len(out) == 1 and out[0]["records"] == 8 and out[0]["nodes"] == {"gpu_memset": 1}
    assert out[0]["beside_us"] == pytest.approx(10.5)  # 1.5 before the memset, 9.0 before the GEMM after it
    assert out[0]["other_us"] == pytest.approx(0.5 + 0.4)  # the first item's gap is 0: it starts the launch


def test_small_launches_are_left_out_and_graphs_are_grouped_by_size():
    recs = []
    for k in range(3):
        recs += _launch(10 + k, 1000.0 * k, STEP)
        recs += _launch(20 + k, 1000.0 * k + 500, [("kernel", 0, 1.0)] * 7 + [("gpu_memcpy", 2.0 + k, 1.0)])
        recs += _launch(30 + k, 1000.0 * k + 900, [("gpu_memcpy", 0, 2.0)])  # a host copy: one record
    rows = ng.summarize(ng.launch_idle(recs, min_records=5))
    assert [(r["records"], r["launches"]) for r in rows] == [(6, 3), (8, 3)]
    assert rows[0]["beside_us"] == pytest.approx(10.5) and rows[1]["beside_us"] == pytest.approx(3.0)
    assert rows[1]["nodes"] == {"gpu_memcpy": 1} and rows[1]["other_us"] == 0


def test_the_script_reads_a_trace_and_writes_json(tmp_path, capsys):
    events = [
        {"ph": "X", "cat": r.cat, "name": r.name, "ts": r.start, "dur": r.end - r.start, "args": {"correlation": 4}}
        for r in _launch(4, 0.0, STEP)
    ]
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    assert ng.main([str(path), "--json", str(tmp_path / "o.json"), "--min-records", "3"]) == 0
    assert "| t.json.gz | 6 | 1 | 1 / 0 | 10.5 | 0.4 |" in capsys.readouterr().out
    assert json.loads((tmp_path / "o.json").read_text())[0]["beside_us"] == 10.5
    with pytest.raises(SystemExit):
        ng.main([str(tmp_path / "missing.json.gz")])


def test_where_lists_each_node_between_its_neighbours(tmp_path, capsys):
    rows = ng.summarize(ng.launch_idle(_launch(4, 0.0, STEP), min_records=3))
    assert rows[0]["sites"] == [[3, "gpu_memset", "kernel2", "kernel4"]]
    events = [
        {"ph": "X", "cat": r.cat, "name": r.name, "ts": r.start, "dur": r.end - r.start, "args": {"correlation": 4}}
        for r in _launch(4, 0.0, STEP + [("gpu_memcpy", 0.2, 1.0)])
    ]
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    assert ng.main([str(path), "--min-records", "3", "--where"]) == 0
    out = capsys.readouterr().out
    assert "t.json.gz, the graph of 7 records:" in out
    assert "    3 gpu_memset  after kernel2, before kernel4" in out
    assert "    6 gpu_memcpy  after kernel5, before -" in out
