"""benchmarks/sampling_history.py: what sampling adds to specgen's step, per recorded commit."""

from __future__ import annotations

import json
from pathlib import Path

from oracles.scripts import benchmark_module


def _module():
    return benchmark_module("sampling_history")


def _bench(path: Path, steps: dict[int, float], mode: str = "specgen") -> None:
    runs = [{"mode": mode, "batch": b, "step_us": us} for b, us in steps.items()]
    runs.append({"mode": "compile", "batch": 1, "step_us": 1e9})  # other modes do not count
    path.write_text(json.dumps({"runs": runs}))


def test_adds_are_sampled_minus_greedy_steps_in_the_named_order_then_the_rest(tmp_path):
    mod = _module()
    for name, greedy, sampled in (("zz_new", 100.0, 130.0), (mod.ORDER[1], 100.0, 400.0), (mod.ORDER[0], 50.0, 60.0)):
        (tmp_path / name).mkdir()
        _bench(tmp_path / name / "bench_greedy.json", {1: greedy, 32: greedy * 2})
        _bench(tmp_path / name / "bench_kernels.json", {1: sampled, 32: sampled * 3})
    _bench(tmp_path / "zz_new" / "bench_torch.json", {1: 1100.0, 32: 5200.0})
    (tmp_path / "no_greedy").mkdir()  # a folder without the pair is left out
    _bench(tmp_path / "no_greedy" / "bench_kernels.json", {1: 1.0})
    rows = mod.history(tmp_path)
    assert [r["folder"] for r in rows] == [mod.ORDER[0], mod.ORDER[1], "zz_new"]
    assert rows[0]["adds"] == {1: 10.0, 32: 80.0} and rows[2]["adds"] == {1: 30.0, 32: 190.0}
    assert rows[2]["torch_adds"] == {1: 1000.0, 32: 5000.0} and "torch_adds" not in rows[0]
    assert mod.table(rows).splitlines()[2] == f"| {mod.ORDER[0]} | 10 | 80 |"
    mod.plot(rows, tmp_path / "adds.png")
    assert (tmp_path / "adds.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_recorded_history_ends_below_where_b32_regressed():
    """The recorded H200 benches: 555fbdb's B = 32 regression (1109 us added) is gone at 9b635c0 (653 us)."""
    rows = {r["folder"]: r["adds"] for r in _module().history()}
    assert round(rows["555fbdb_chunked"][32]) == 1109 and round(rows["9b635c0_registers"][32]) == 653
    assert rows["9b635c0_registers"][32] < rows["5742a51_vocab_kernels"][32] < rows["555fbdb_chunked"][32]
