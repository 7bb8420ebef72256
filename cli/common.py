"""What every subcommand shares: the usage error, the argument parser, number lists, output folders."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

# What the compiler brings (the ``build`` extra); the runtime and ``specgen doctor`` need none of it.
COMPILER_MODULES = ("tilelang", "jinja2", "sympy", "networkx") + (("tomli",) if sys.version_info < (3, 11) else ())


class UsageError(Exception):
    """Bad input from the command line: printed as one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    """argparse whose own errors are ``UsageError`` too (one line, status 2), not an exit."""

    def error(self, message):
        raise UsageError(message)


def int_list(text: str, option: str = "the list") -> list[int]:
    """``"4,5,6"`` -> [4, 5, 6]; ``"2-4,8"`` -> [2, 3, 4, 8]; an empty list or range is an error."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, sep, hi = part.partition("-")
        try:
            lo_n, hi_n = int(lo), int(hi) if sep else None
        except ValueError:
            raise UsageError(f"{option}: not a number list: '{text}' (use 4,5,6 or 2-16)") from None
        if hi_n is not None and hi_n < lo_n:
            raise UsageError(f"{option}: the range {part} is empty (write the lower end first: {hi_n}-{lo_n})")
        out += list(range(lo_n, hi_n + 1)) if hi_n is not None else [lo_n]
    if not out:
        raise UsageError(f"{option}: no numbers in '{text}' (use 4,5,6 or 2-16)")
    return out


def name_list(text: str, option: str) -> list[str]:
    """Comma-separated names; an option given with no name in it is an error."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UsageError(f"{option}: no names in '{text}' (comma-separated, e.g. {option} a,b)")
    return names


def writable_dir(path: str | Path, option: str) -> Path:
    """``path`` as a folder this process can write into (made if missing), checked before any work."""
    path = Path(path)
    probe = path / f".specgen-write-check-{os.getpid()}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise UsageError(
            f"{option} {path}: cannot write there ({e.strerror or e}); choose a folder you can write to"
        ) from None
    return path


def require_compiler(command: str, modules: tuple[str, ...] = COMPILER_MODULES) -> None:
    """``UsageError`` (one line, status 2) naming ``specgen[build]`` when ``modules`` are not all importable.

    Looked up, not imported: a warm build never pays for TileLang.
    """
    missing = [m for m in modules if not _importable(m)]
    if missing:
        raise UsageError(
            f"{command} needs the compiler, which is not installed here (missing: {', '.join(missing)}); "
            f"install it with pip install 'specgen[build]'"
        )


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a finder that refuses it, or a module entry of None
        return False
