"""The package face and the shape of ``specgen.passes``: imports, sizes, one cost guard."""

import ast
from pathlib import Path

import networkx as nx

import specgen.passes as passes
from specgen.passes import PASSES

ROOT = Path(passes.__file__).parent
FACE = {"build_boundary", "DEFAULT_PIPELINE", "PassManager", "PassPipelineError", "parse_pipeline", "run_pipeline",
        "PASSES", "CostModel", "bubble_us", "render_text", "render_mermaid", "summary", "BoundaryGraphError",
        "plan_boundary", "plan_variants"}


def _modules():
    """(dotted name, path, syntax tree) of every module of the package."""
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        yield ".".join(["specgen.passes", *(p for p in parts if p != "__init__")]), path, ast.parse(path.read_text())


def _imports(name, path, tree):
    """(imported module, relative?, line) for every import, those inside functions too."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, False, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:  # "from . import semantics" imports a module
                sub = f"{base}.{alias.name}"
                yield (sub if _is_module(sub) else base), bool(node.level), node.lineno


def _is_module(dotted):
    if not dotted.startswith("specgen.passes."):
        return False
    rel = Path(*dotted.split(".")[2:])
    return (ROOT / rel).with_suffix(".py").exists() or (ROOT / rel / "__init__.py").exists()


def test_the_face_exports_what_the_cli_uses():
    assert FACE <= set(passes.__all__) and all(hasattr(passes, n) for n in FACE)


def test_one_pass_per_file_named_after_it():
    for key, cls in PASSES.items():
        assert key == cls.name
        assert cls.__module__ == f"specgen.passes.{key.replace('-', '_')}"


def test_imports_are_relative_and_never_reach_codegen_or_the_cli():
    for name, path, tree in _modules():
        for target, relative, line in _imports(name, path, tree):
            where = f"{path.relative_to(ROOT)}:{line}"
            assert relative or not target.startswith("specgen"), f"{where}: absolute import of {target}"
            assert not target.startswith(("specgen.codegen", "specgen.cli", "specgen.driver")), f"{where}: {target}"


def test_no_import_cycles_inside_the_package():
    g = nx.DiGraph()
    for name, path, tree in _modules():
        g.add_node(name)
        for target, _, _ in _imports(name, path, tree):
            if target.startswith("specgen.passes") and target != name:
                g.add_edge(name, target)
    cycles = list(nx.simple_cycles(g))
    assert cycles == []


def test_no_file_over_400_lines():
    for _, path, _ in _modules():
        assert len(path.read_text().splitlines()) <= 400, path


def test_the_bubble_comparison_lives_in_base_only():
    for name, path, tree in _modules():
        if name == "specgen.passes.base" or name.startswith("specgen.passes.ir"):
            continue
        calls = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and getattr(n.func, "id", getattr(n.func, "attr", None)) == "bubble_us"]
        assert calls == [], f"{path.name} compares bubbles itself (lines {calls}); use base.no_worse"
