"""What a first use of ``specgen`` meets, each checked in a real process where the symptom lives there:
errors printed once, pipes closed early, failed runs that say so, quiet output."""

from __future__ import annotations

import subprocess
import sys


def _specgen(*argv: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specgen", *argv], capture_output=True, text=True, **kw)


def test_a_tp_the_model_cannot_take_is_one_error_before_any_rank_starts(tmp_path):
    proc = _specgen(
        "bench", "--tp", "3", "--device", "cpu", "--out", str(tmp_path / "o"), "--kernels", str(tmp_path / "k")
    )
    assert proc.returncode == 2
    assert proc.stderr == "specgen: error: --tp 3: tiny's query heads (4) does not divide evenly over 3 ranks\n"
    assert not (tmp_path / "k").exists()
