"""The ``specgen`` command: its subcommands, one-line errors with status 2, the package entry points."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from specgen import cli
from specgen.cli import build_parser, main
from specgen.cli.common import UsageError, int_list


def _one_line_error(capsys, message: str) -> None:
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err, err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["build", "--target", "tpu"], "unknown target 'tpu' (known: c, cuda, ascend)"),
        (["build", "--target", "c,tpu"], "unknown target 'tpu'"),
        (["build", "--boundary", "nope"], "unknown boundary 'nope'"),
        (["build", "--families", "nope"], "unknown family 'nope'"),
        (["build", "--widths", "17"], "width 17"),
        (["build", "--widths", "1"], "width 1"),
        (["build", "--widths", "4,x"], "not a number list"),
        (["build", "--block-sizes", "0"], "block size must be positive"),
        (["build", "--draft-dtypes", "int16"], "int16"),
        (["build", "--jobs", "0"], "--jobs must be at least 1"),
        (["build", "--bogus"], "unrecognized arguments"),
        (["plan", "--boundary", "nope"], "unknown boundary"),
        (["plan", "--boundary", "context-kv", "--pipeline", "hoist,bogus"], "unknown pass"),
        (["plan", "--boundary", "context-kv", "--width", "17"], "width 17"),
        (["plan", "--boundary", "context-kv", "--format", "svg"], "invalid choice"),
        (["frobnicate"], "invalid choice"),
        ([], "required"),
    ],
)
def test_bad_input_is_one_line_and_status_2(argv, message, capsys, tmp_path):
    if argv[:1] == ["build"]:
        argv = [*argv, "--out", str(tmp_path / "k")]
    assert main(argv) == 2
    _one_line_error(capsys, message)


def test_bad_matrix_file(capsys, tmp_path):
    (tmp_path / "m.toml").write_text("widths = [4]\nfoo = 1\n")
    assert main(["build", "--matrix", str(tmp_path / "m.toml"), "--out", str(tmp_path / "k")]) == 2
    _one_line_error(capsys, "unknown keys ['foo']")


def test_bad_cost_file(capsys, tmp_path):
    assert main(["plan", "--boundary", "context-kv", "--costs", str(tmp_path / "none.json")]) == 2
    _one_line_error(capsys, "--costs")


def test_cuda_without_nvcc_is_a_clear_error(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert main(["build", "--target", "cuda", "--out", str(tmp_path / "k")]) == 2
    _one_line_error(capsys, "nvcc not found")


def test_plan_formats(capsys):
    assert main(["plan", "--boundary", "verify-to-draft", "--width", "5", "--batch", "4", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"before", "after"}
    assert data["after"]["host_syncs_on_critical_path"] <= data["before"]["host_syncs_on_critical_path"]
    assert main(["plan", "--boundary", "draft-to-verify", "--format", "mermaid"]) == 0
    assert capsys.readouterr().out.count("sequenceDiagram") == 2
    assert main(["plan", "--boundary", "context-kv"]) == 0
    out = capsys.readouterr().out
    assert "== before ==" in out and "== after ==" in out and "predicted_bubble_us:" in out
    assert out.splitlines()[-1].startswith("graph: ")


def test_plan_dump_dir(tmp_path, capsys):
    assert main(["plan", "--boundary", "context-kv", "--format", "json", "--dump-dir", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir())[0].startswith("000_")


def test_int_list():
    assert int_list("4,5,6") == [4, 5, 6] and int_list("2-4,8") == [2, 3, 4, 8] and int_list(" 4, 5") == [4, 5]
    assert int_list("7-7") == [7]
    for bad, match in (
        ("4-x", "not a number list"),
        ("", "no numbers"),
        (",", "no numbers"),
        ("9-7", "the range 9-7 is empty"),
    ):
        with pytest.raises(UsageError, match=match):
            int_list(bad, "--widths")


def test_every_subcommand_is_registered():
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == {"plan", "build", "doctor", "bench", "serve-bench", "generate", "draft-vocab"}
    assert all(callable(m.register) for m in cli.COMMANDS)


def _fake(run):
    """A subcommand module with the ``register(sub)`` contract."""

    def register(sub):
        sub.add_parser("fake").set_defaults(func=run)

    return SimpleNamespace(register=register)


def test_main_records_argv_and_maps_interrupts(monkeypatch, capsys):
    seen = {}
    monkeypatch.setattr(cli, "COMMANDS", (_fake(lambda args: seen.update(argv=args.cli_argv)),))
    assert main(["fake"]) == 0 and seen["argv"] == ["fake"]

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "COMMANDS", (_fake(interrupted),))
    assert main(["fake"]) == 130
    assert capsys.readouterr().err == "specgen: interrupted\n"

    def missing(args):
        raise KeyError("no such variant")

    monkeypatch.setattr(cli, "COMMANDS", (_fake(missing),))
    assert main(["fake"]) == 2
    _one_line_error(capsys, "no such variant")


def test_doctor_without_kernels(capsys, tmp_path):
    assert main(["doctor", "--kernels", str(tmp_path / "none")]) == 1
    out = capsys.readouterr().out
    assert "target c:" in out and "target ascend:" in out and "not loadable" in out


@pytest.mark.parametrize(
    "entry", [["-m", "specgen"], ["-c", "import sys; from specgen.cli import main; sys.exit(main())"]]
)
def test_entry_points(entry):
    proc = subprocess.run([sys.executable, *entry, "plan", "--boundary", "nope"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("specgen: error: unknown boundary")
    help_text = subprocess.run([sys.executable, *entry, "--help"], capture_output=True, text=True, check=True).stdout
    assert all(cmd in help_text for cmd in ("plan", "build", "doctor", "bench"))


@pytest.mark.slow
def test_build_quiet_one_family(tmp_path, capsys):
    out = tmp_path / "k"
    argv = [
        "build",
        "--families",
        "greedy_prefix_verify",
        "--widths",
        "4",
        "--draft-dtypes",
        "int32",
        "--boundary",
        "verify-to-draft",
        "--out",
        str(out),
        "--quiet",
    ]
    assert main(argv) == 0
    cap = capsys.readouterr()
    assert cap.err == "" and cap.out.startswith("specgen build: 1 built, 0 cached, 0 failed")
    manifest = json.loads((out / "manifest.json").read_text())
    assert [v["key"] for v in manifest["variants"]] == ["greedy_prefix_verify__w4"]
    assert main(argv) == 0 and "0 built, 1 cached" in capsys.readouterr().out
