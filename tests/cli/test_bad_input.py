"""Every bad input is one line on stderr naming the fix, exit status 2, and nothing built or written first."""

from __future__ import annotations

import json
import sys
import types

import pytest
import torch

from specgen.cli import main

CASES = [
    # plan
    (["plan", "--boundary", "context-kv", "--pipeline", "fuse{max-group=x}"], "max-group must be an integer"),
    (
        ["plan", "--boundary", "context-kv", "--pipeline", "fuse{max-group=0}"],
        "max-group must be an integer of at least 2",
    ),
    (["plan", "--boundary", "context-kv", "--pipeline", ","], "names no pass"),
    (["plan", "--boundary", "context-kv", "--dump-dir", "{unwritable}"], "--dump-dir"),
    (["plan", "--boundary", "context-kv", "--costs", "{list_json}"], "must be a JSON object, not list"),
    (["plan", "--boundary", "context-kv", "--costs", "{run_number_json}"], "'run' must map op kinds to microseconds"),
    (["plan", "--boundary", "context-kv", "--costs", "{missing}"], "cannot read it"),
    # build
    (["build", "--out", "{unwritable}"], "--out"),
    (["build", "--out", "/proc/x"], "--out /proc/x: cannot write there"),
    (["build", "--matrix", "{matrix_str}"], "'widths' must be a non-empty list of integers"),
    (["build", "--matrix", "{matrix_float}"], "got [4.5]"),
    (["build", "--matrix", "{matrix_splits}"], "'num_splits' must be an integer"),
    (["build", "--widths", "9-7"], "the range 9-7 is empty (write the lower end first: 7-9)"),
    (["build", "--widths", ","], "--widths: no numbers"),
    (["build", "--block-sizes", ""], "--block-sizes: no numbers"),
    (["build", "--draft-dtypes", ","], "--draft-dtypes: no names"),
    (["build", "--target", ","], "--target: no names"),
    (["build", "--arch", "banana", "--target", "cuda"], "--arch banana: not a CUDA architecture"),
    # bench
    (["bench", "--device", "nope"], "--device nope: use cpu or cuda"),
    (["bench", "--depth", "5-3"], "--depth: the range 5-3 is empty"),
    (["bench", "--depth", "0"], "must be at least 1"),
    (["bench", "--block-size", "0", "--block-table-width", "0"], "--block-size must be at least 1"),
    (["bench", "--depth", "20", "--block-table-width", "0"], "--depth 20: verify width 21 is beyond"),
    (["bench", "--modes", ","], "--modes: no names"),
    (["bench", "--out", "{unwritable}"], "--out"),
    (["bench", "--replot", "{list_json}"], "not a bench.json that specgen bench wrote"),
    (["bench", "--replot", "{no_runs_json}"], "no finished run to draw"),
]


@pytest.fixture
def files(tmp_path):
    """The files the cases point at, by name."""
    (tmp_path / "a_file").write_text("")
    paths = {"unwritable": tmp_path / "a_file" / "x", "missing": tmp_path / "missing.json"}
    for name, text in {
        "list_json": "[1, 2]",
        "run_number_json": '{"run": 5}',
        "no_runs_json": json.dumps({"runs": [{"mode": "specgen", "depth": 3, "batch": 1, "error": "failed"}]}),
        "matrix_str": 'widths = "4"\n',
        "matrix_float": "widths = [4.5]\n",
        "matrix_splits": 'num_splits = "x"\n',
    }.items():
        paths[name] = tmp_path / f"{name}.{'toml' if name.startswith('matrix') else 'json'}"
        paths[name].write_text(text)
    return paths


@pytest.mark.parametrize("argv, message", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_input_is_one_line_naming_the_fix_and_status_2(argv, message, files, tmp_path, capsys):
    argv = [a.format(**files) if a.startswith("{") else a for a in argv]
    kernels = tmp_path / "kernels"
    if argv[0] in ("build", "bench") and "--out" not in argv:
        argv += ["--out", str(tmp_path / "out")]
    if argv[0] == "bench":
        argv += (
            ["--kernels", str(kernels), "--device", "cpu"] if "--device" not in argv else ["--kernels", str(kernels)]
        )
    assert main(argv) == 2
    cap = capsys.readouterr()
    assert cap.err.startswith("specgen: error: ") and cap.err.count("\n") == 1, cap.err
    assert message in cap.err and "Traceback" not in cap.err + cap.out
    assert not kernels.exists(), "nothing is built for a command that fails on its input"


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_bench_on_cuda_without_cuda_fails_before_building(tmp_path, capsys):
    kernels = tmp_path / "kernels"
    assert main(["bench", "--device", "cuda", "--kernels", str(kernels), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err == "specgen: error: --device cuda: torch sees no CUDA device here; use --device cpu\n"
    assert not kernels.exists()


def test_a_bad_input_in_a_real_process_has_no_traceback(tmp_path):
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-m", "specgen", "bench", "--device", "nope", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and proc.stderr == "specgen: error: --device nope: use cpu or cuda (or cuda:N)\n"


def test_matrix_files_read_on_python_3_10_with_tomli(tmp_path, monkeypatch, capsys):
    """Without the standard tomllib (Python 3.10) the matrix is read with tomli, the same parser."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: tomli is the real parser, wrapped here to see it used
        import tomli as tomllib

    used = []
    fake = types.ModuleType("tomli")
    fake.TOMLDecodeError = tomllib.TOMLDecodeError
    fake.loads = lambda text: used.append("loads") or tomllib.loads(text)
    fake.load = lambda f: used.append("load") or tomllib.load(f)
    monkeypatch.setitem(sys.modules, "tomllib", None)  # import tomllib now fails as on 3.10
    monkeypatch.setitem(sys.modules, "tomli", fake)
    from specgen.specializations.matrix import load_toml

    (tmp_path / "m.toml").write_text("widths = [5]\nblock_sizes = [16]\n")
    matrix = load_toml(tmp_path / "m.toml")
    assert matrix.widths == (5,) and matrix.block_sizes == (16,) and used == ["loads"]
    (tmp_path / "bad.toml").write_text("widths = [")
    assert main(["build", "--matrix", str(tmp_path / "bad.toml"), "--out", str(tmp_path / "o")]) == 2
    assert "not valid TOML" in capsys.readouterr().err and used == ["loads", "load"]


def test_pyproject_installs_tomli_where_tomllib_is_missing():
    """The matrix file is the compiler's input: tomli comes with the ``build`` extra (and ``test``)."""
    from pathlib import Path

    import specgen
    from specgen.specializations.matrix import _toml

    tomllib = _toml()
    data = tomllib.loads((Path(specgen.__file__).parent / "pyproject.toml").read_text())
    assert data["project"]["requires-python"] == ">=3.10"
    for extra in ("build", "test"):
        assert any(
            d.replace(" ", "").startswith("tomli") and "python_version<'3.11'" in d.replace(" ", "")
            for d in data["project"]["optional-dependencies"][extra]
        ), extra
