"""The kernel contract document (docs/kernels.md) and the packaging: every family described, every citation of the
contract pointing at the repository's own document, every package folder listed in pyproject.toml."""

from __future__ import annotations

from pathlib import Path

from oracles.package_files import FILES, ROOT, _is_package, _report

THIS_FILE = Path(__file__).resolve()


def test_kernel_contract_document_covers_every_family():
    from specgen.specializations.families import FAMILIES

    doc = ROOT / "docs" / "kernels.md"
    assert doc.is_file(), "docs/kernels.md is missing"
    text = doc.read_text(encoding="utf-8")
    missing = [name for name in FAMILIES if f"`{name}`" not in text and f"### {name}" not in text]
    assert not missing, f"docs/kernels.md does not describe {missing}"


def test_sources_cite_the_contract_in_the_repository():
    sources = [
        *FILES.values(),
        *(ROOT / "templates").glob("*.jinja"),
        *(ROOT / "tests").rglob("*.py"),
        ROOT / "README.md",
    ]
    problems = []
    for path in sorted(set(sources)):
        if path.resolve() == THIS_FILE:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "KERNELS.md" in line:
                problems.append(f"{path.relative_to(ROOT).as_posix()}:{n}: cites KERNELS.md, not docs/kernels.md")
    assert not problems, _report("citations of KERNELS.md", problems)


def test_pyproject_lists_every_package():
    """A non-editable install carries only the packages pyproject names: every package folder is listed."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    folders = {m for m in FILES if _is_package(m)}
    assert folders <= listed, f"packages missing from pyproject.toml: {sorted(folders - listed)}"
