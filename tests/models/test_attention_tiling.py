"""The paged attention's launch choices (``triton_attention.Tiling``) and the sweep that measures them.

``benchmarks/attention_sweep.py`` runs here in Triton's interpreter (a child process with
``TRITON_INTERPRET=1``) on tiny heads: every tiling it tries, the float32 defaults among them, gives the float64
reference's output within float32's error, on a prefill chunk and on verify steps of unequal lengths.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specgen.models.triton_attention import MAX_BLOCK_M, WIDE_BLOCK_M, Tiling, attention_tiles

SWEEP = Path(__file__).parents[2] / "benchmarks" / "attention_sweep.py"


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"block_m": 24}, "block_m must be a power of two >= 16"),
        ({"block_m": 8}, "block_m must be a power of two >= 16"),
        ({"block_n": 0}, "block_n must be a power of two >= 16"),
        ({"splits": 3}, "splits must be a power of two >= 1"),
        ({"num_warps": 3}, "num_warps must be 1, 2, 4, 8 or 16"),
        ({"num_stages": 0}, "num_stages must be >= 1"),
        ({"precision": "fp64"}, "precision must be 'ieee', 'tf32x3' or 'tf32'"),
    ],
)
def test_a_tiling_the_kernel_cannot_take_is_refused_by_name(kw, words):
    with pytest.raises(ValueError, match=words):
        Tiling(**kw)


def test_tiles_take_the_cap_asked_for():
    """A 2048-row prefill of 2 query heads per KV head: 64 rows a program by default, 32 at float32's cap."""
    assert attention_tiles(2048, 2) == (MAX_BLOCK_M, 4096 // MAX_BLOCK_M)
    assert attention_tiles(2048, 2, WIDE_BLOCK_M) == (32, 128)
    assert attention_tiles(4, 2, WIDE_BLOCK_M) == (16, 1)  # a verify step: the smallest tile holds it


def test_the_sweep_checks_every_tiling_against_float64(tmp_path):
    pytest.importorskip("triton")
    out = tmp_path / "sweep.json"
    argv = "--device cpu --prefill-rows 40 --verify-batch 3 --verify-keys 70 --heads 4,2,16 --block-size 16"
    argv += " --block-m 16,32 --block-n 16 --warps 4 --stages 1 --precision ieee,tf32x3 --repeats 1"
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run(
        [sys.executable, str(SWEEP), *argv.split(), "--out", str(out)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    saved = json.loads(out.read_text())
    assert saved["command"].startswith("python3 benchmarks/attention_sweep.py") and saved["dtype"] == "float32"
    tilings = [r["tiling"] for r in saved["results"]]
    assert len(tilings) == 1 + 2 * 2 and tilings[0]["block_m"] is None  # the defaults first, then the grid
    for r in saved["results"]:
        assert set(r["shapes"]) == {"prefill 40", "verify B=3 R=4"}
        for name, m in r["shapes"].items():
            assert "error" not in m and m["us"] > 0 and m["max_err"] < 1e-5, (r["tiling"], name, m)
    assert "prefill 40 (float32): fastest of 5 tilings" in done.stdout
