"""What a build's cache keys hold besides the program: the compiler and its version, TileLang's version,
the compile flags' version and a digest of the renderer's own source."""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["FLAGS_VERSION", "renderer_digest", "tilelang_version", "toolchain"]

FLAGS_VERSION = 2  # bump when compile flags or the artifact layout change (2: variants share artifacts)


def toolchain(target: str, arch: str | None) -> dict:
    """What goes into the cache key besides the program; a missing compiler stops the build here."""
    import subprocess

    from .lower import compiler

    cc = compiler(target)  # raises ToolchainMissing with what to install
    lines = subprocess.run([cc, "--version"], capture_output=True, text=True, check=False).stdout.splitlines()
    lines = [ln for ln in lines if ln.strip()] or ["unknown"]
    return {
        "tilelang": tilelang_version(),
        "compiler": cc,
        "arch": arch,
        "flags_version": FLAGS_VERSION,
        "compiler_version": lines[-1] if cc == "nvcc" else lines[0],
    }


def renderer_digest() -> str:
    """What a rendered program depends on besides its variant: the renderer's and the templates' source."""
    root = Path(__file__).resolve().parent.parent
    from importlib.metadata import version

    h = hashlib.sha256(f"jinja2 {version('jinja2')} sympy {version('sympy')}\n".encode())
    for f in sorted(
        [*(root / "codegen").glob("*.py"), *(root / "specializations").rglob("*.py"), *(root / "templates").iterdir()]
    ):
        if f.is_file():
            h.update(f"{f.relative_to(root)}\n".encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def tilelang_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tilelang")
    except PackageNotFoundError:
        return None
