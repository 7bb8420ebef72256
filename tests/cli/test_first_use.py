"""What a first use of ``specgen`` meets, each checked in a real process where the symptom lives there:
errors printed once, pipes closed early, failed runs that say so, quiet output."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _specgen(*argv: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specgen", *argv], capture_output=True, text=True, **kw)


def test_a_tp_the_model_cannot_take_is_one_error_before_any_rank_starts(tmp_path):
    proc = _specgen(
        "bench", "--tp", "3", "--device", "cpu", "--out", str(tmp_path / "o"), "--kernels", str(tmp_path / "k")
    )
    assert proc.returncode == 2
    assert proc.stderr == "specgen: error: --tp 3: tiny's query heads (4) does not divide evenly over 3 ranks\n"
    assert not (tmp_path / "k").exists()


@pytest.mark.parametrize(
    "argv",
    [["plan", "--boundary", "context-kv", "--format", "json"], ["plan", "--boundary", "verify-to-draft"], ["doctor"]],
    ids=["plan-json", "plan-text", "doctor"],
)
def test_a_reader_that_stops_early_ends_the_command_quietly(argv, tmp_path):
    """``specgen ... | head -1``: the pipe is closed before the command writes; no traceback, status 141."""
    from specgen.cli import BROKEN_PIPE

    proc = subprocess.Popen(
        [sys.executable, "-m", "specgen", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path
    )
    proc.stdout.close()  # the reader is gone before the first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == BROKEN_PIPE
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err, err


def test_a_reader_that_stops_after_one_line(tmp_path):
    """The shell's own ``| head -1`` with pipefail: the first line arrives, the rest is dropped quietly."""
    script = f"set -o pipefail; {sys.executable} -m specgen plan --boundary context-kv --format json | head -1"
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert proc.stdout == "{\n" and proc.stderr == ""
    assert proc.returncode in (0, 141)  # 0 when everything fitted in the pipe before head left
