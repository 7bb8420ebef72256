"""benchmarks/sampling_history.py: what sampling adds to specgen's step, per recorded commit."""

from __future__ import annotations

import json
from pathlib import Path

from oracles.scripts import benchmark_module


def _module():
    return benchmark_module("sampling_history")


def _bench(path: Path, steps: dict[int, float], mode: str = "specgen", device: str | None = None) -> None:
    runs = [{"mode": mode, "batch": b, "step_us": us} for b, us in steps.items()]
    runs.append({"mode": "compile", "batch": 1, "step_us": 1e9})  # other modes do not count
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"runs": runs} | ({"environment": {"device": device}} if device else {})))


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
    assert mod.table(rows).splitlines()[2] == f"| {mod.ORDER[0]} | ? | 10 | 80 |"
    mod.plot(rows, tmp_path / "adds.png")
    assert (tmp_path / "adds.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_recorded_history_ends_below_where_b32_regressed():
    """The recorded H200 benches: 555fbdb's B = 32 regression (1109 us added) is gone at 9b635c0 (653 us)."""
    rows = {r["folder"]: r["adds"] for r in _module().history()}
    assert round(rows["555fbdb_chunked"][32]) == 1109 and round(rows["9b635c0_registers"][32]) == 653
    assert rows["9b635c0_registers"][32] < rows["5742a51_vocab_kernels"][32] < rows["555fbdb_chunked"][32]


def test_an_engine_folder_pair_names_its_gpu_and_the_kernels_pair_comes_first(tmp_path):
    """A folder of ``engine/bench_greedy.json`` and ``engine/bench_sampled_new.json`` (the H100 calls) counts, its GPU
    read from the greedy bench; where a folder holds two pairs, ``bench_kernels.json``'s is the one."""
    mod = _module()
    _bench(tmp_path / "zz_h100" / "engine" / "bench_greedy.json", {1: 100.0}, device="NVIDIA H100 80GB HBM3")
    _bench(tmp_path / "zz_h100" / "engine" / "bench_sampled_new.json", {1: 137.0})
    _bench(tmp_path / "zz_h100" / "engine" / "bench_sampled_prev.json", {1: 999.0})  # another build: not counted
    for name, sampled in (("bench_kernels.json", 120.0), ("bench_sampled_onehot.json", 500.0)):
        _bench(tmp_path / "zz_h200" / name, {1: sampled})
    _bench(tmp_path / "zz_h200" / "bench_greedy.json", {1: 100.0}, device="NVIDIA H200")
    rows = {r["folder"]: r for r in mod.history(tmp_path)}
    assert rows["zz_h100"]["gpu"] == "H100" and rows["zz_h100"]["adds"] == {1: 37.0}
    assert rows["zz_h200"]["gpu"] == "H200" and rows["zz_h200"]["adds"] == {1: 20.0}
    mod.plot(list(rows.values()), tmp_path / "two_gpus.png")
    assert (tmp_path / "two_gpus.png").read_bytes()[:4] == b"\x89PNG"


def test_the_recorded_h100_history_shows_the_early_draw():
    """The recorded H100 benches: at e1b2951 sampling adds under half of db745e6's at B = 32 (108 against 271 us)."""
    rows = {r["folder"]: r for r in _module().history()}
    early, columns = rows["e1b2951_h100_early_draw"], rows["db745e6_h100_columns"]
    assert early["gpu"] == columns["gpu"] == "H100"
    assert 2 * early["adds"][32] < columns["adds"][32] and round(early["adds"][32]) == 108
