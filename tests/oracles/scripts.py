"""The scripts under ``benchmarks/`` (not a package), imported from the installed package's folder."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import specgen


def benchmark_module(name: str):
    """``benchmarks/NAME.py`` as a module."""
    path = Path(specgen.__file__).parent / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
