"""The package's source files as the repository holds them: shared by the architecture and document tests."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "specgen"
EXCLUDED_DIRS = {"tests", ".venv", "build", "benchmarks", "examples", "__pycache__"}


def _package_files() -> dict[str, Path]:
    """Module name -> file, for every .py file of the package (tests, venv, build outputs excluded)."""
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if any(p in EXCLUDED_DIRS or p.startswith(".") or p.endswith(".egg-info") for p in rel.parts[:-1]):
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join([PACKAGE, *parts])] = path
    return out


FILES = _package_files()


def _is_package(module: str) -> bool:
    return FILES[module].name == "__init__.py"


def _report(title: str, problems: list[str]) -> str:
    return f"{len(problems)} {title}:\n  " + "\n  ".join(problems)
