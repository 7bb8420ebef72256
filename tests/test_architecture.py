"""The package's architecture, checked from its source: the one place its layer rules live.

Layers, top to bottom: the package face (``cli/``, ``driver.py``, ``__init__.py``,
``__main__.py`` and any other root module) -> ``bench/`` -> ``engine/`` -> ``models/``
-> ``parallel/`` -> ``runtime/`` -> ``specializations/``, with the compiler
(``passes/`` and ``codegen/``, siblings) between the face and the runtime.  Imports
run down only (imports inside functions and under ``TYPE_CHECKING`` count), no two
modules import each other, no source file exceeds 400 lines, the package imports
itself relatively, ``runtime`` (the library users import) loads no compiler and none
of the application's heavy dependencies, and ``specializations`` no heavy dependency.
Every test collects all violations and reports them at once, each as ``file:line``
with the import that breaks the rule.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import networkx as nx
from oracles.package_files import FILES, PACKAGE, ROOT, _is_package, _report

MAX_LINES = 400

# Which layer may import which: the face sits on top, specializations at the bottom.
_BELOW_RUNTIME = {"runtime", "specializations"}
ALLOWED = {
    "face": {"face", "bench", "engine", "models", "parallel", "passes", "codegen", "runtime", "specializations"},
    "bench": {"bench", "engine", "models", "parallel", *_BELOW_RUNTIME},
    "engine": {"engine", "models", "parallel", *_BELOW_RUNTIME},
    "models": {"models", "parallel", *_BELOW_RUNTIME},
    "parallel": {"parallel", *_BELOW_RUNTIME},
    "passes": {"passes", *_BELOW_RUNTIME},
    "codegen": {"codegen", *_BELOW_RUNTIME},
    "runtime": _BELOW_RUNTIME,
    "specializations": {"specializations"},
}
LAYERS = tuple(ALLOWED)
# Third-party (and standard) modules a layer must not import; "at import" bans only import-time loads.
RUNTIME_BANNED = (
    "tilelang",
    "sympy",
    "jinja2",
    "matplotlib",
    "triton",
    "safetensors",
    "subprocess",
    "torch.distributed",
)
BANNED_ANYWHERE = {
    "runtime": set(RUNTIME_BANNED),
    "parallel": {"matplotlib", "tilelang"},
    "models": {"matplotlib", "tilelang"},
    "engine": {"matplotlib", "tilelang"},
}
BANNED_AT_IMPORT = {"specializations": {"torch", "sympy", "jinja2", "tilelang"}}
# What the runtime may import besides the standard library and its own layer: torch and the device bindings.
RUNTIME_THIRD_PARTY = {"torch", "torch_npu", "cuda"}


@dataclass(frozen=True)
class Import:
    source: str  # importing module
    path: str  # file relative to the repository root
    line: int
    text: str  # the import statement as written
    target: str  # a specgen module, or a third-party top-level name
    full: str  # the imported module as spelled, resolved (``torch.distributed``, ``specgen.runtime.ops``)
    internal: bool
    in_function: bool
    type_checking: bool
    absolute: bool  # spelled ``specgen.``/``import specgen``

    @property
    def where(self) -> str:
        how = " (under TYPE_CHECKING)" if self.type_checking else " (inside a function)" if self.in_function else ""
        return f"{self.path}:{self.line}: `{self.text}`{how}"


def layer(module: str) -> str:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    if top == "templates":
        return "codegen"  # the templates are codegen's data
    return top if top in LAYERS and top != "face" else "face"


def _known(name: str) -> str:
    """The longest prefix of ``name`` that is a module of the package."""
    while name not in FILES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, in_function=False, type_checking=False):
    """Yield (import node, in_function, type_checking) for every import below ``node``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, in_function, type_checking
        func = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.body:
                yield from _walk(ast.Module(body=[stmt], type_ignores=[]), func, True)
            for stmt in child.orelse:
                yield from _walk(ast.Module(body=[stmt], type_ignores=[]), func, type_checking)
            continue
        yield from _walk(child, func, type_checking)


@lru_cache(maxsize=None)
def _tree(module: str) -> ast.Module:
    path = FILES[module]
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _base(module: str, node: ast.ImportFrom) -> str:
    """The module an ``ImportFrom`` names, relative levels resolved against ``module``'s package."""
    if node.level == 0:
        return node.module or ""
    package = module if _is_package(module) else module.rsplit(".", 1)[0]
    for _ in range(node.level - 1):
        package = package.rsplit(".", 1)[0]
    return f"{package}.{node.module}" if node.module else package


@lru_cache(maxsize=None)
def _reexports(package: str) -> dict[str, str]:
    """Names a package's ``__init__`` takes from its own modules: name -> defining module."""
    out = {}
    for node, _, _ in _walk(_tree(package)):
        if isinstance(node, ast.ImportFrom):
            base = _base(package, node)
            if base.startswith(package + ".") and base in FILES:
                for alias in node.names:
                    out[alias.asname or alias.name] = base
    return out


def _resolve_name(base: str, name: str, depth: int = 0) -> str:
    """The module ``from base import name`` depends on: a submodule, a re-export's origin, or ``base``."""
    if f"{base}.{name}" in FILES:
        return f"{base}.{name}"
    base = _known(base)
    if depth < 8 and base in FILES and _is_package(base) and name in _reexports(base):
        origin = _reexports(base)[name]
        return _resolve_name(origin, name, depth + 1) if _is_package(origin) else origin
    return base


def _imports_of(module: str) -> list[Import]:
    path = FILES[module].relative_to(ROOT).as_posix()
    out = []
    for node, in_function, type_checking in _walk(_tree(module)):
        text = ast.unparse(node)
        common = dict(
            source=module, path=path, line=node.lineno, text=text, in_function=in_function, type_checking=type_checking
        )
        if isinstance(node, ast.Import):
            for alias in node.names:
                internal = alias.name == PACKAGE or alias.name.startswith(PACKAGE + ".")
                target = _known(alias.name) if internal else alias.name.split(".")[0]
                out.append(Import(target=target, full=alias.name, internal=internal, absolute=internal, **common))
            continue
        base = _base(module, node)
        internal = base == PACKAGE or base.startswith(PACKAGE + ".")
        if not internal:
            out.append(Import(target=base.split(".")[0], full=base, internal=False, absolute=False, **common))
            continue
        for target in dict.fromkeys(_resolve_name(base, alias.name) for alias in node.names):
            if target != module:  # one record per imported module, however many names come from it
                out.append(Import(target=target, full=target, internal=True, absolute=node.level == 0, **common))
    return out


@lru_cache(maxsize=1)
def all_imports() -> tuple[Import, ...]:
    return tuple(i for m in FILES for i in _imports_of(m))


def module_graph(*, import_time_only=False, implicit_parents=False) -> nx.DiGraph:
    """specgen modules and third-party names (``ext:NAME``); edges carry the imports that make them."""
    g = nx.DiGraph()
    g.add_nodes_from(FILES)
    for i in all_imports():
        if import_time_only and (i.in_function or i.type_checking):
            continue
        dst = i.target if i.internal else f"ext:{i.target}"
        if not g.has_edge(i.source, dst):
            g.add_edge(i.source, dst, imports=[])
        g.edges[i.source, dst]["imports"].append(i)
    if implicit_parents:  # importing a.b.c runs a/__init__ and a/b/__init__ first
        for m in FILES:
            if "." in m and not g.has_edge(m, m.rsplit(".", 1)[0]):
                g.add_edge(m, m.rsplit(".", 1)[0], imports=[])
    return g


def _chain(g: nx.DiGraph, path: list[str]) -> str:
    steps = []
    for src, dst in zip(path, path[1:]):
        imports = g.edges[src, dst]["imports"]
        steps.append(imports[0].where if imports else f"{src} runs its parent package {dst}")
        steps[-1] = f"{src} -> {dst.removeprefix('ext:')} ({steps[-1]})"
    return "\n      ".join(steps)


# --- static checks ------------------------------------------------------------------------------


def test_the_package_is_found():
    assert {"specgen", "specgen.runtime.semantics", "specgen.specializations.families"} <= set(FILES)


def test_no_import_cycles():
    g = module_graph().subgraph(FILES)  # third-party names cannot close a cycle
    problems = []
    for component in nx.strongly_connected_components(g):
        if len(component) < 2:
            continue
        cycle = [src for src, _ in nx.find_cycle(g.subgraph(component))]
        problems.append(f"cycle among {sorted(component)}:\n      " + _chain(g, [*cycle, cycle[0]]))
    assert not problems, _report("import cycles", problems)


def test_imports_run_down_the_layers():
    problems = []
    for i in all_imports():
        if i.internal and layer(i.target) not in ALLOWED[layer(i.source)]:
            problems.append(
                f"{i.where}: {layer(i.source)} ({i.source}) imports {layer(i.target)} ({i.target}); "
                f"{layer(i.source)} may import only {sorted(ALLOWED[layer(i.source)])}"
            )
    assert not problems, _report("imports against the layers", problems)


def _banned(name: str, banned) -> str | None:
    return next((b for b in banned if name == b or name.startswith(b + ".")), None)


def test_lower_layers_avoid_heavy_dependencies():
    problems = []
    for i in all_imports():
        if i.internal:
            continue
        where = layer(i.source)
        if hit := _banned(i.full, BANNED_ANYWHERE.get(where, ())):
            problems.append(f"{i.where}: {where} never imports {hit}")
        elif (hit := _banned(i.full, BANNED_AT_IMPORT.get(where, ()))) and not (i.in_function or i.type_checking):
            problems.append(f"{i.where}: {where} does not import {hit} at import time")
    assert not problems, _report("third-party imports against the layers", problems)


def test_runtime_stands_on_torch_and_the_device_bindings_only():
    problems = []
    for i in all_imports():
        if layer(i.source) != "runtime" or i.internal or i.target == "__future__":
            continue
        if i.target not in sys.stdlib_module_names and i.target not in RUNTIME_THIRD_PARTY:
            problems.append(
                f"{i.where}: runtime imports {i.target} (only the standard library, "
                f"{sorted(RUNTIME_THIRD_PARTY)} and specializations)"
            )
    assert not problems, _report("runtime imports outside torch and the device bindings", problems)


def test_source_files_are_short():
    problems = []
    for module, path in FILES.items():
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MAX_LINES:
            problems.append(f"{path.relative_to(ROOT).as_posix()}: {n} lines (at most {MAX_LINES})")
    assert not problems, _report("source files over the line limit", problems)


def _absolute_allowed(module: str) -> bool:
    """``__main__`` runs as a program, and the templates are rendered into code used from outside."""
    return module.endswith(".__main__") or module.split(".")[1:2] == ["templates"]


def test_package_imports_itself_relatively():
    problems = [
        f"{i.where}: use a relative import inside the package"
        for i in all_imports()
        if i.absolute and not _absolute_allowed(i.source)
    ]
    assert not problems, _report("absolute specgen imports", sorted(set(problems)))


# --- import-time checks in a fresh interpreter --------------------------------------------------

_PROBE = textwrap.dedent("""
    import importlib, importlib.util, json, pkgutil, sys
    package, banned = sys.argv[1], sys.argv[2].split(",")
    import torch  # noqa: F401  what torch loads by itself is not the package's doing

    def loaded():
        return {m for m in sys.modules if any(m == b or m.startswith(b + ".") for b in banned)}

    def walk(name):
        yield name
        spec = importlib.util.find_spec(name)
        for info in pkgutil.iter_modules(spec.submodule_search_locations or []):
            child = f"{name}.{info.name}"
            yield from (walk(child) if info.ispkg else [child])

    report = {}
    for name in walk(package):
        before = loaded()
        try:
            importlib.import_module(name)
        except Exception as exc:
            report[name] = [f"import failed: {type(exc).__name__}: {exc}"]
            continue
        new = sorted({m.split(".")[0] if not m.startswith("specgen.") else ".".join(m.split(".")[:2])
                      for m in loaded() - before})
        if new:
            report[name] = new
    print(json.dumps(report))
""")


def _probe(package: str, banned: list[str], tmp_path: Path) -> dict[str, list[str]]:
    """For each module of ``package`` (walked without importing), the banned modules its import loaded first."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, package, ",".join(banned)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _explain(report: dict[str, list[str]]) -> list[str]:
    g = module_graph(import_time_only=True, implicit_parents=True)
    problems = []
    for module, loaded in report.items():
        for what in loaded:
            node = what if what.startswith(PACKAGE + ".") else f"ext:{what}"
            node = _known(node) if node.startswith(PACKAGE + ".") else node
            try:
                how = _chain(g, nx.shortest_path(g, module, node))
            except (nx.NetworkXNoPath, nx.NodeNotFound):
                how = "(no static import path found)"
            problems.append(f"importing {module} loads {what}:\n      {how}")
    return problems


def test_runtime_loads_nothing_above_it(tmp_path):
    above = [f"specgen.{name}" for name in LAYERS if name not in ("face", "runtime", "specializations")]
    banned = [*RUNTIME_BANNED, *above, "specgen.driver", "specgen.cli", "cuda.bindings"]
    problems = _explain(_probe("specgen.runtime", banned, tmp_path))
    assert not problems, _report("runtime modules loading what the library must not", problems)


def test_specializations_load_no_heavy_dependency(tmp_path):
    problems = _explain(_probe("specgen.specializations", ["torch", "sympy", "jinja2"], tmp_path))
    assert not problems, _report("specializations modules loading heavy dependencies", problems)
