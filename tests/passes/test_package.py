"""The face of ``specgen.passes``, one pass per file, one cost guard (the import rules: tests/test_architecture.py)."""

import ast
from pathlib import Path

import specgen.passes as passes
from specgen.passes import PASSES

ROOT = Path(passes.__file__).parent
FACE = {
    "build_boundary",
    "DEFAULT_PIPELINE",
    "PassManager",
    "PassPipelineError",
    "parse_pipeline",
    "run_pipeline",
    "PASSES",
    "CostModel",
    "bubble_us",
    "render_text",
    "render_mermaid",
    "summary",
    "BoundaryGraphError",
    "plan_boundary",
    "plan_variants",
}


def _modules():
    """(dotted name, path, syntax tree) of every module of the package."""
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        yield ".".join(["specgen.passes", *(p for p in parts if p != "__init__")]), path, ast.parse(path.read_text())


def test_the_face_exports_what_the_cli_uses():
    assert FACE <= set(passes.__all__) and all(hasattr(passes, n) for n in FACE)


def test_one_pass_per_file_named_after_it():
    for key, cls in PASSES.items():
        assert key == cls.name
        assert cls.__module__ == f"specgen.passes.{key.replace('-', '_')}"


def test_the_bubble_comparison_lives_in_base_only():
    for name, path, tree in _modules():
        if name == "specgen.passes.base" or name.startswith("specgen.passes.ir"):
            continue
        calls = [
            n.lineno
            for n in ast.walk(tree)
            if isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == "bubble_us"
        ]
        assert calls == [], f"{path.name} compares bubbles itself (lines {calls}); use base.no_worse"
