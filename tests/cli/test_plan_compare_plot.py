"""``specgen plan --compare``'s picture: ``compare.png`` beside ``compare.json`` where matplotlib is installed."""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import pytest

import specgen
from specgen.cli import main
from specgen.cli.plan_compare_plot import plot

RUN = Path(specgen.__file__).parent / "benchmarks/results/performance/sweep_3cd945d_h100/bench_d3"


def _compare(tmp_path, capsys) -> tuple[str, Path]:
    out = tmp_path / "compare.json"
    argv = ["plan", "--compare", str(RUN / "bench.json"), "--costs", str(RUN / "costs.json"), "--compare-json"]
    assert main([*argv, str(out)]) == 0
    return capsys.readouterr().out, out


def test_compare_draws_its_cells_beside_the_json(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    printed, out = _compare(tmp_path, capsys)
    png = out.with_suffix(".png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    assert printed.splitlines()[-1] == f"wrote {out} and {png}"
    # a document with no measured bubble (a CPU bench's) draws nothing
    doc = json.loads(out.read_text())
    for c in doc["cells"]:
        for part in ("draft_to_verify", "verify_to_draft"):
            c[part]["measured_us"] = None
    assert plot(doc, tmp_path / "none.png") is None and not (tmp_path / "none.png").exists()


def test_without_matplotlib_the_compare_still_writes_its_json(tmp_path, capsys, monkeypatch):
    real = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    printed, out = _compare(tmp_path, capsys)
    assert printed.splitlines()[-1] == f"wrote {out}"
    assert json.loads(out.read_text())["cells"] and not out.with_suffix(".png").exists()


def test_a_picture_that_cannot_be_written_says_so_and_the_rest_stands(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    _, out = _compare(tmp_path, capsys)
    doc = json.loads(out.read_text())
    assert plot(doc, tmp_path / "missing" / "compare.png") is None
    assert "cannot write" in capsys.readouterr().err
    # figures at or below zero (an event-level gap can be negative) still draw on the log axes
    for c in doc["cells"]:
        c["draft_to_verify"]["predicted_us"] = 0.0
        if c["verify_to_draft"].get("unprofiled"):
            c["verify_to_draft"]["unprofiled"]["measured_us"] = -5.0
    assert plot(doc, tmp_path / "floor.png") == tmp_path / "floor.png"
