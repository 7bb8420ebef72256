"""What a first use of ``specgen`` meets, each checked in a real process where the symptom lives there:
errors printed once, pipes closed early, failed runs that say so, quiet output."""

from __future__ import annotations

import re
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


TINY = ["--model", "tiny", "--steps", "4", "--warmup", "1", "--prompt-len", "8", "--block-table-width", "8"]


def _ok(mode, **extra):
    return {"mode": mode, "depth": 3, "batch": 1, "width": 4, "tpot_ms": 1.0, "acceptance": 0.5, **extra}


@pytest.mark.parametrize(
    "runs, aborted, message",
    [
        (
            [_ok("baseline"), {"mode": "specgen", "depth": 3, "batch": 1, "width": 4, "error": "RuntimeError: boom"}],
            None,
            "specgen: mode specgen failed at depth 3 B=1: RuntimeError: boom",
        ),
        (
            [_ok("baseline", equals_greedy=True), _ok("specgen", equals_greedy=False)],
            None,
            "specgen: mode specgen at depth 3 B=1: its tokens differ from plain greedy decoding (--check)",
        ),
        ([_ok("baseline")], "the device failed", "specgen: the sweep stopped early: the device failed"),
    ],
    ids=["raised", "not-greedy", "aborted"],
)
def test_a_failed_mode_makes_the_bench_fail_and_says_which(runs, aborted, message, tmp_path, monkeypatch, capsys):
    from specgen.bench import harness
    from specgen.cli import main

    result = {"command": "specgen bench", "model": "tiny", "environment": {}, "runs": runs, "aborted": aborted}
    result.update(acceptance_p=None, skipped_modes={}, ratios=harness.ratios(runs))
    monkeypatch.setattr(harness, "run_bench", lambda config, library, tp=None, trace_dir=None: result)
    out = tmp_path / "results"
    argv = ["bench", *TINY, "--modes", "baseline", "--device", "cpu", "--out", str(out)]
    assert main(argv) == 1
    assert message in capsys.readouterr().err.splitlines()
    assert (out / "bench.json").exists()  # what finished is written all the same
    for r in runs:
        r.pop("equals_greedy", None)
    result.update(runs=[r for r in runs if "error" not in r], aborted=None)
    assert main(argv) == 0 and "specgen: " not in capsys.readouterr().err


@pytest.mark.parametrize("targets", [[], ["--target", "c"], ["--target", "c,ascend"]])
def test_an_arch_without_a_cuda_target_is_an_error_naming_the_fix(targets, tmp_path, capsys):
    from specgen.cli import main

    out = tmp_path / "k"
    assert main(["build", "--arch", "sm_80", *targets, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("specgen: error: --arch sm_80 is the CUDA architecture of --target cuda")
        and err.count("\n") == 1
    )
    named = (targets[1] if targets else "c") + ",cuda"
    assert f"add --target {named}, or drop --arch" in err
    assert not out.exists()  # nothing is built for it


@pytest.mark.slow
def test_replace_removes_the_target_folders_it_empties(folder, keys, small):
    """A folder with c and cuda variants rebuilt for c alone with --replace: no empty cuda/ is left behind."""
    import json

    from specgen.cli import main

    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "cuda").mkdir()
    for v in list(manifest["variants"]):  # the files a cuda build leaves: artifact, program, source, stamp
        files = {
            "artifact": f"cuda/{v['key']}.cubin",
            "program": f"cuda/{v['key']}.tl.py",
            "source": f"cuda/{v['key']}.cu",
        }
        for rel in [*files.values(), f"cuda/{v['key']}.json"]:
            (folder / rel).write_bytes((folder / v["artifact"]).read_bytes())
        manifest["variants"].append(dict(v, target="cuda", arch="sm_90", **files))
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert main(["build", "--widths", "6", "--replace", "--out", str(folder), *small]) == 0
    assert keys(folder) == {("greedy_prefix_verify__w6", "c")}
    assert not (folder / "cuda").exists()
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["c"]


@pytest.mark.slow
def test_a_tiny_bench_prints_no_profiler_trace_points_and_no_python_none(engine_kernels, tmp_path):
    """stdout and stderr of a real ``specgen bench`` (the CPU profiles its baseline runs): no kineto ``USDT:``
    lines, no bare ``None`` where a figure is missing."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    proc = _specgen(
        "bench",
        *TINY,
        "--device",
        "cpu",
        "--profile-steps",
        "2",
        "--kernels",
        str(engine_kernels.root),
        "--out",
        str(tmp_path / "o"),
        env=dict(env, OMP_NUM_THREADS="1"),
    )
    assert proc.returncode == 0, proc.stderr
    lines = (proc.stdout + proc.stderr).splitlines()
    assert any("profiled depth 3 batch 1 baseline" in ln for ln in lines)  # the profile ran
    assert not [ln for ln in lines if ln.strip() == "None" or "USDT" in ln or re.search(r"\bNone\b", ln)]
