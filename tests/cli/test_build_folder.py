"""``specgen build`` adds to its folder; builds at once; interrupted builds; doctor's check of the folder."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import specgen
from specgen.cli import main

pytestmark = pytest.mark.slow
BASE = {("greedy_prefix_verify__w4", "c"), ("greedy_prefix_verify__w5", "c")}


def _suggested(message: str) -> list[str]:
    """The arguments of the ``specgen build ...`` command an error message suggests."""
    m = re.search(r"`specgen (build [^`]*)`", message)
    assert m, message
    return shlex.split(m[1])


def test_the_missing_variant_suggestion_keeps_the_build(folder, keys, small, capsys):
    from specgen.runtime.library import VariantNotBuilt, load_library

    with pytest.raises(VariantNotBuilt) as err:
        load_library(folder).get("greedy_prefix_verify", 7)
    suggested = _suggested(str(err.value))
    assert suggested[-2:] == ["--out", str(folder)]  # the suggestion names the folder it was raised for
    assert main([*suggested, *small]) == 0
    assert keys(folder) == BASE | {("greedy_prefix_verify__w7", "c")}
    assert "2 kept from earlier builds" in capsys.readouterr().out


def test_the_tamper_message_rebuilds_that_variant_and_keeps_the_others(folder, keys, small):
    from specgen.runtime.library import load_library
    from specgen.runtime.manifest import ArtifactError, read_artifact

    lib = load_library(folder)
    entry = next(e for e in lib.entries() if e.width == 4)
    art = folder / entry.artifact
    art.write_bytes(art.read_bytes() + b"tampered")
    with pytest.raises(ArtifactError) as err:
        read_artifact(entry, lib.root)
    argv = _suggested(str(err.value))
    assert argv[argv.index("--out") + 1] == str(folder.resolve())
    assert main([*argv, "--boundary", "verify-to-draft", "--draft-dtypes", "int32", "--quiet"]) == 0
    assert keys(folder) == BASE
    again = load_library(folder)
    for e in again.entries():  # w5 shared w4's library: the suggested command remade both
        read_artifact(e, again.root)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_a_plain_build_after_c_cuda_keeps_cuda_and_doctor_calls_it_information(folder, keys, small, capsys):
    assert main(["build", "--target", "c,cuda", "--widths", "4", "--out", str(folder), *small]) == 0
    cuda = keys(folder, "cuda")
    assert cuda == {("greedy_prefix_verify__w4", "cuda")}
    assert main(["build", "--widths", "4", "--out", str(folder), *small]) == 0
    assert keys(folder, "cuda") == cuda and keys(folder, "c") == BASE
    capsys.readouterr()
    assert main(["doctor", "--kernels", str(folder)]) == 0
    cap = capsys.readouterr()
    assert "problem" not in cap.out and cap.err == ""
    if not torch.cuda.is_available():
        assert "cuda: 1 intact; information: no CUDA device here" in cap.out


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device runs cuda variants")
def test_doctor_on_a_cpu_machine_checks_cuda_entries_against_their_cubin(folder, capsys):
    """A ``--target c,cuda`` manifest whose cuda artifacts are intact files but not cubins of those kernels.

    The shared library stands in for the cubin: its hash matches and it even
    exports the entry symbol, but it has no ``.nv.info`` parameter records, so
    the launch could not be checked against it: doctor names each file.
    """
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "cuda").mkdir()
    for v in list(manifest["variants"]):
        blob = (folder / v["artifact"]).read_bytes()
        (folder / "cuda" / f"{v['key']}.cubin").write_bytes(blob)
        manifest["variants"].append(dict(v, target="cuda", arch="sm_90", artifact=f"cuda/{v['key']}.cubin"))
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert main(["doctor", "--kernels", str(folder)]) == 1
    cap = capsys.readouterr()
    assert "  c: 2 load" in cap.out and "information: no CUDA device here" in cap.out
    for v in manifest["variants"][:2]:
        assert (
            f"problem: cuda/{v['key']}.cubin: {v['entry']} takes parameters of [] bytes; the manifest's {v['params']}"
        ) in cap.out


def test_two_builds_into_one_folder_at_once_both_succeed(folder, keys, small, capsys):
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(
            [str(Path(specgen.__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")]
        ),
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "specgen", "build", "--widths", widths, "--out", str(folder), *small],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for widths in ("5,6", "6,7")
    ]
    results = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    assert keys(folder) == BASE | {("greedy_prefix_verify__w6", "c"), ("greedy_prefix_verify__w7", "c")}
    assert not (folder / ".staging").exists()
    assert main(["doctor", "--kernels", str(folder)]) == 0
    assert "  c: 4 load" in capsys.readouterr().out


def test_staging_left_by_an_interrupted_build_is_removed(folder, keys, small, capsys):
    from specgen.codegen.folder import _host

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    left = folder / ".staging" / f"{_host()}-{gone.pid}-0000" / "greedy_prefix_verify__w4-c"
    left.mkdir(parents=True)
    (left / "greedy_prefix_verify__w4.so").write_bytes(b"half written")
    assert main(["doctor", "--kernels", str(folder)]) == 0
    assert "left by an interrupted build" in capsys.readouterr().out
    assert main(["build", "--widths", "4", "--out", str(folder), *small]) == 0
    assert not (folder / ".staging").exists() and keys(folder) == BASE


def test_an_interrupted_build_removes_its_own_staging(folder, keys, small, monkeypatch):
    from specgen.codegen import build

    def interrupted(*args, **kw):
        assert list((folder / ".staging").iterdir())  # this build's folder exists while it runs
        raise KeyboardInterrupt

    monkeypatch.setattr(build, "_build", interrupted)
    assert main(["build", "--widths", "6", "--out", str(folder), *small]) == 130
    assert not (folder / ".staging").exists() and keys(folder) == BASE


@pytest.mark.parametrize(
    "damage, message, problems",
    [
        ("missing", ".so: artifact of greedy_prefix_verify__w4 (c) cannot be read", 2),
        ("tampered", "does not match the manifest's", 2),
        ("extra", "c/greedy_prefix_verify__w9.so: on disk but not in the manifest", 1),
    ],
)
def test_doctor_finds_a_folder_that_disagrees_with_its_manifest(folder, damage, message, problems, capsys):
    manifest = json.loads((folder / "manifest.json").read_text())
    art = folder / next(v["artifact"] for v in manifest["variants"] if v["key"] == "greedy_prefix_verify__w4")
    if damage == "missing":
        art.unlink()
    elif damage == "tampered":
        art.write_bytes(art.read_bytes() + b"x")
    else:
        shutil.copy(art, folder / "c" / "greedy_prefix_verify__w9.so")
    assert main(["doctor", "--kernels", str(folder)]) == 1
    out = capsys.readouterr().out
    # w4 and w5 were compiled together: damage to their library is a problem of each
    assert "problem: " in out and message in out and f"{problems} problem(s)" in out


def test_replace_leaves_only_this_build(folder, keys, small):
    assert main(["build", "--widths", "6", "--replace", "--out", str(folder), *small]) == 0
    assert keys(folder) == {("greedy_prefix_verify__w6", "c")}
    assert sorted(p.name for p in (folder / "c").iterdir() if p.name.startswith("greedy_prefix_verify__w4")) == []
    plans = json.loads((folder / "manifest.json").read_text())["plans"]
    assert list(plans["verify-to-draft"]) == ["w6_bt64_bs128_int32"]


def test_a_failed_compile_shows_the_compilers_own_lines(tmp_path, small, monkeypatch, capsys):
    """The console keeps what the compiler said, not only the command that failed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "g++"
    fake.write_text("#!/bin/sh\necho 'kernel.cc:12:3: error: the compiler says why' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("SPECGEN_CODEGEN_CACHE", raising=False)  # no artifact from an earlier build stands in
    assert main(["build", "--widths", "4", "--out", str(tmp_path / "kernels"), *small]) == 1
    out = capsys.readouterr().out
    assert "failed: greedy_prefix_verify__w4 (c):" in out
    assert "    kernel.cc:12:3: error: the compiler says why" in out
