"""Every command a message suggests is run as printed, in a small build folder, and the problem is gone after it."""

from __future__ import annotations

import re
import shlex

import pytest
import torch

from specgen.cli import main

pytestmark = pytest.mark.slow
BASE = {("greedy_prefix_verify__w4", "c"), ("greedy_prefix_verify__w5", "c")}


def _suggested(message: str) -> list[str]:
    """The ``specgen build ...`` command a message suggests, as the arguments of ``main``."""
    m = re.search(r"`specgen (build [^`]*)`", message)
    assert m, message
    return shlex.split(m[1])


def test_the_hint_for_a_missing_int64_variant_builds_it(tmp_path, capsys):
    from specgen.runtime.library import VariantNotBuilt, load_library

    out = tmp_path / "kernels"
    family = "spec_verify_token_update"
    small = ["--families", family, "--draft-dtypes", "int32", "--quiet"]
    assert (
        main(["build", "--widths", "8", "--block-table-widths", "8", "--block-sizes", "16", "--out", str(out), *small])
        == 0
    )
    last, drafts, tokens = (
        torch.arange(2, dtype=torch.int32),
        torch.ones(2, 7, dtype=torch.int64),
        torch.zeros(16, dtype=torch.int32),
    )
    with pytest.raises(VariantNotBuilt) as err:
        load_library(out).get(family, 8, 8, 16)(last, drafts, tokens)
    hint = _suggested(str(err.value))
    assert hint[-2:] == ["--out", str(out)]
    capsys.readouterr()
    assert main([*hint, "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("specgen build: 1 built, 0 cached, 0 failed, 1 kept")  # it alone
    load_library(out).get(family, 8, 8, 16)(last, drafts, tokens)  # now built: it runs
    assert tokens.view(2, 8)[:, 1:].eq(1).all() and tokens.view(2, 8)[:, 0].tolist() == [0, 1]


def test_doctors_advice_for_an_interrupted_builds_artifact_lists_it_again(folder, keys, small, monkeypatch, capsys):
    """A build stopped after its artifact and stamps moved in, before the manifest merge: doctor names the file
    and a command; that command (run as printed) lists it again without building anything else."""
    from specgen.codegen import build

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(build, "_refresh_stamps", interrupted)
    assert main(["build", "--widths", "6,7", "--out", str(folder), *small]) == 130
    monkeypatch.undo()
    assert keys(folder) == BASE
    capsys.readouterr()
    assert main(["doctor", "--kernels", str(folder)]) == 1
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if "problem:" in ln]
    assert "on disk but not in the manifest (a build that did not finish)" in line
    assert main([*_suggested(line), "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("specgen build: 0 built, 2 cached")  # nothing else was built
    assert keys(folder) == BASE | {("greedy_prefix_verify__w6", "c"), ("greedy_prefix_verify__w7", "c")}
    assert main(["doctor", "--kernels", str(folder)]) == 0
    assert "problem" not in capsys.readouterr().out


def test_doctors_advice_for_a_file_no_stamp_names_clears_it(folder, keys, small, capsys):
    import shutil

    art = next(folder.glob("c/*.so"))
    shutil.copy(art, folder / "c" / "greedy_prefix_verify-0000000000000000.so")
    assert main(["doctor", "--kernels", str(folder)]) == 1
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if "problem:" in ln]
    assert "no build stamp names it" in line and "the next build into this folder removes it" in line
    assert main(["build", "--widths", "4", "--out", str(folder), *small]) == 0  # any build
    assert main(["doctor", "--kernels", str(folder)]) == 0 and keys(folder) == BASE


def test_the_tamper_message_rebuilds_that_artifact_alone(folder, keys, capsys):
    from specgen.runtime.library import load_library
    from specgen.runtime.manifest import ArtifactError, read_artifact

    lib = load_library(folder)
    entry = next(e for e in lib.entries() if e.width == 4)
    art = folder / entry.artifact
    art.write_bytes(art.read_bytes() + b"tampered")
    with pytest.raises(ArtifactError) as err:
        read_artifact(entry, lib.root)
    capsys.readouterr()
    assert main([*_suggested(str(err.value)), "--quiet"]) == 0  # as printed: nothing added
    assert capsys.readouterr().out.startswith("specgen build: 2 built, 0 cached")  # w4 and w5 shared it
    assert keys(folder) == BASE
    assert main(["doctor", "--kernels", str(folder)]) == 0


def test_the_bench_hint_on_a_machine_that_cannot_build_makes_the_kernels_it_needs(tmp_path, monkeypatch, capsys):
    import sys

    from specgen.cli import bench as bench_cli

    kernels = tmp_path / "kernels"
    argv = ["bench", "--depth", "2", "--block-table-width", "8", "--steps", "4", "--prompt-len", "8", "--warmup", "1"]
    argv += ["--modes", "specgen", "--device", "cpu", "--kernels", str(kernels), "--out", str(tmp_path / "o")]
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "specgen.driver", None)  # no compiler here: the kernels must come prebuilt
        assert main(argv) == 2
    hint = _suggested(capsys.readouterr().err)
    assert main(hint) == 0  # run as printed, where the compiler is
    monkeypatch.setattr(bench_cli, "_build", lambda *a: pytest.fail("the hint's build lacks a kernel the bench needs"))
    assert main(argv) == 0
