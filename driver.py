"""The compiler driver: plan with ``passes``, then build with ``codegen``.

passes/ and codegen/ are siblings that never import each other; this module,
at the top of the package, is where they meet::

    summary = plan_and_build(DEFAULT, targets=("c",), out="build/specgen_kernels")

Planning runs the pass pipeline on every boundary x layout (it imports torch);
its result is remembered in the build folder, keyed by the matrix and by the
source of the passes and the families, so a warm rebuild plans nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from . import __version__
from .specializations.matrix import Matrix
from .specializations.plan import BOUNDARY_NAMES, Plan
from .specializations.variants import VariantSpec

PLAN_CACHE = ".plans.json"


def _sources_digest() -> str:
    """Plans depend on the passes' and the ground floor's source: hash every file of both packages.

    The files are read, not imported: a warm build never pays for torch.
    """
    h = hashlib.sha256()
    for pkg in ("passes", "specializations"):
        root = Path(__file__).resolve().parent / pkg
        for f in sorted(root.rglob("*.py")):
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def _plan_key(matrix: Matrix, boundaries) -> str:
    blob = json.dumps([repr(matrix), list(boundaries), __version__, _sources_digest()])
    return hashlib.sha256(blob.encode()).hexdigest()


def cached_plans(out: Path, matrix: Matrix, boundaries=BOUNDARY_NAMES):
    """``passes.plan.plan_variants``, remembered in ``out/.plans.json``."""
    key = _plan_key(matrix, boundaries)
    path = Path(out) / PLAN_CACHE
    try:
        data = json.loads(path.read_text())
        if data["key"] == key:
            specs = [VariantSpec(**s) for s in data["specs"]]
            plans = [Plan.from_dict(p["boundary"], p["record"], matrix.num_splits) for p in data["plans"]]
            return specs, {k: set(v) for k, v in data["needed_by"].items()}, plans
    except (OSError, ValueError, KeyError, TypeError):
        pass
    from .passes.plan import plan_variants

    specs, needed_by, plans = plan_variants(matrix, boundaries)
    blob = {
        "key": key,
        "specs": [_fields(s) for s in specs],
        "needed_by": {k: sorted(v) for k, v in needed_by.items()},
        "plans": [{"boundary": p.boundary, "record": p.as_dict()} for p in plans],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(blob, sort_keys=True))
    os.replace(tmp, path)
    return specs, needed_by, plans


def _fields(spec: VariantSpec) -> dict:
    return {f: getattr(spec, f) for f in spec.__dataclass_fields__}


def plan_and_build(
    matrix: Matrix,
    targets=("c",),
    out: str | Path = "build/specgen_kernels",
    arch: str | None = None,
    jobs: int = 1,
    boundaries=BOUNDARY_NAMES,
    families: tuple[str, ...] | None = None,
    progress=sys.stderr,
    replace: bool = False,
):
    """Plan every boundary x layout of ``matrix``, then build the variants the plans name.

    The build adds to ``out``: variants already there stay unless ``replace``.
    """
    from .codegen.build import build

    specs, needed_by, plans = cached_plans(Path(out), matrix, boundaries)
    return build(
        specs,
        needed_by,
        plans,
        matrix,
        targets,
        out,
        arch=arch,
        jobs=jobs,
        families=families,
        progress=progress,
        version=__version__,
        replace=replace,
    )
