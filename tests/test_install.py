"""A runtime-only install: the runtime, the package face and ``specgen --help`` without the compiler.

``pip install specgen`` brings torch alone; the compiler (TileLang, jinja2, sympy, networkx) is the
``build`` extra.  Each test runs a fresh interpreter, most of them with the compiler's modules
refused by a ``sys.meta_path`` finder (``oracles.no_compiler``), as on a machine that lacks them.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from oracles.no_compiler import BLOCK, COMPILER


def run_without_compiler(code: str, *args: str, cwd=None) -> subprocess.CompletedProcess:
    """``python -c BLOCK + code args...``: the compiler's modules unimportable."""
    return subprocess.run(
        [sys.executable, "-c", BLOCK + textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )


def test_the_face_and_the_runtime_import_no_compiler(tmp_path):
    """Nothing of the compiler at import time, even where it is installed: the package, the runtime, the CLI."""
    code = textwrap.dedent(f"""
        import sys
        import specgen, specgen.runtime, specgen.cli, specgen.driver
        from specgen.cli import build_parser
        build_parser().format_help()
        print(sorted(m for m in sys.modules if m.split(".")[0] in {COMPILER!r}))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_help_runs_without_the_compiler(tmp_path):
    done = run_without_compiler(
        """
        from specgen.cli import main
        sys.exit(main(["--help"]))
        """,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "build" in done.stdout and "doctor" in done.stdout


@pytest.mark.parametrize(
    "command, missing",
    [
        (["build", "--out", "{out}"], "tilelang, jinja2, sympy, networkx"),
        (["plan", "--boundary", "draft-to-verify"], "networkx"),
    ],
)
def test_compiler_commands_name_the_build_extra(tmp_path, command, missing):
    """``specgen build`` / ``specgen plan`` without the compiler: one line naming ``specgen[build]``, status 2."""
    argv = [a.replace("{out}", str(tmp_path / "kernels")) for a in command]
    done = run_without_compiler(
        f"""
        from specgen.cli import main
        sys.exit(main({argv!r}))
        """,
        cwd=tmp_path,
    )
    assert done.returncode == 2, (done.stdout, done.stderr[-3000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"specgen: error: {command[0]} needs the compiler")
    assert f"(missing: {missing})" in lines[0] and "pip install 'specgen[build]'" in lines[0]
    assert not (tmp_path / "kernels").exists()
