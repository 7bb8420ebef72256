"""The scripts under ``benchmarks/`` (not a package), imported from the installed package's folder, and the tests'
case scripts, run in a child process."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import specgen


def benchmark_module(name: str):
    """``benchmarks/NAME.py`` as a module."""
    path = Path(specgen.__file__).parent / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_case_script(script: Path, *args: str, interpret: bool, timeout: int = 900) -> dict:
    """A case script run in a child process (``TRITON_INTERPRET=1`` there when ``interpret``, so it never leaks
    into a CUDA run); its last line of output, as JSON."""
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    done = subprocess.run(
        [sys.executable, str(script), *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
