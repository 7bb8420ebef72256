"""benchmarks/draft_vocab_ab.py: the TPOTs and the draft's device time of two benches (without and with
``--draft-vocab``), the table and the picture, on files made here; the benches given the wrong way round are
refused."""

from __future__ import annotations

import json

import pytest
from oracles.scripts import benchmark_module


def _bench(path, draft_vocab, tpots, draft=None, vocab_pass=None):
    runs = []
    for (batch, mode), tpot in tpots.items():
        run = {"batch": batch, "mode": mode, "tpot_ms": tpot}
        if draft is not None:
            parts = {"matmul": draft[0], "norm": draft[1]} | (
                {} if vocab_pass is None else {"vocabulary pass": vocab_pass}
            )
            run["kernel_breakdown"] = {"parts": {"draft": parts, "forward": {}}}
        runs.append(run)
    runs.append({"batch": 8, "mode": "compile", "error": "out of memory"})  # a failed run is left out
    path.write_text(json.dumps({"draft_vocab": draft_vocab, "runs": runs}))
    return path


def test_the_table_and_the_picture(tmp_path, capsys):
    ab = benchmark_module("draft_vocab_ab")
    whole = _bench(tmp_path / "w.json", None, {(1, "specgen"): 1.2, (8, "specgen"): 1.5}, draft=(800.0, 40.0))
    subset = _bench(tmp_path / "s.json", 64, {(1, "specgen"): 0.9, (8, "specgen"): 1.2}, draft=(200.0, 40.0))
    rows, size = ab.compare(whole, subset)
    assert size == 64 and [(r["batch"], r["mode"]) for r in rows] == [(1, "specgen"), (8, "specgen")]
    assert rows[0]["change"] == pytest.approx(0.9 / 1.2 - 1)
    assert (rows[0]["whole_draft_us"], rows[0]["subset_draft_matmul_us"]) == (840.0, 200.0)
    ab.main([str(whole), str(subset), "--out", str(tmp_path / "ab.png")])
    out = capsys.readouterr().out
    assert "| 1 | specgen | 1.2000 | 0.9000 | -25.0% | 840 (800) -> 240 (200) |" in out
    assert (tmp_path / "ab.png").stat().st_size > 1000
    with pytest.raises(SystemExit, match="without --draft-vocab first"):
        ab.compare(subset, whole)


def test_a_sampling_drafts_vocabulary_pass_gets_its_own_figure(tmp_path, capsys):
    ab = benchmark_module("draft_vocab_ab")
    whole = _bench(tmp_path / "w.json", None, {(32, "specgen"): 4.0}, draft=(900.0, 50.0), vocab_pass=300.0)
    subset = _bench(tmp_path / "s.json", 32768, {(32, "specgen"): 3.2}, draft=(250.0, 50.0), vocab_pass=70.0)
    rows, _ = ab.compare(whole, subset)
    assert (rows[0]["whole_draft_vocab_us"], rows[0]["subset_draft_vocab_us"]) == (300.0, 70.0)
    ab.main([str(whole), str(subset)])
    out = capsys.readouterr().out
    assert "draft us (matmuls; vocabulary pass)" in out
    assert "| 32 | specgen | 4.0000 | 3.2000 | -20.0% | 1250 (900; 300) -> 370 (250; 70) |" in out
