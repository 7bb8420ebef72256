"""runtime/ stands on specializations/, torch and the device bindings only.

Checked twice: statically (every import statement of the runtime's modules,
those inside functions included) and by importing every module in a fresh
interpreter and looking at what got loaded.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import specgen.runtime

RUNTIME = Path(specgen.runtime.__file__).parent
MODULES = sorted(p for p in RUNTIME.glob("*.py"))
THIRD_PARTY = {"torch", "torch_npu", "cuda"}  # torch, and the device bindings (imported lazily)
FORBIDDEN = ("tilelang", "sympy", "jinja2", "specgen.codegen", "specgen.passes", "specgen.driver", "specgen.cli")


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, 0, alias.name
        elif isinstance(node, ast.ImportFrom):
            yield node.lineno, node.level, node.module or ""


def test_every_import_is_allowed():
    bad = []
    for path in MODULES:
        for line, level, module in _imports(path):
            top = module.split(".")[0]
            if level == 1 or (level == 2 and top == "specializations") or module == "__future__":
                continue
            if level == 0 and (top in sys.stdlib_module_names or top in THIRD_PARTY):
                continue
            bad.append(f"{path.name}:{line}: {'.' * level}{module}")
    assert not bad, "runtime/ imports outside specializations, torch and stdlib:\n" + "\n".join(bad)


def test_importing_the_runtime_loads_nothing_above_it():
    names = ", ".join(f"specgen.runtime.{p.stem}" for p in MODULES if p.stem != "__init__")
    code = (f"import sys, {names}; "
            f"bad = [m for m in sys.modules if m.startswith({FORBIDDEN!r})]; "
            "assert not bad, bad; "
            "assert 'cuda.bindings' not in sys.modules, 'cuda.bindings imported eagerly'")
    subprocess.run([sys.executable, "-c", code], check=True)
