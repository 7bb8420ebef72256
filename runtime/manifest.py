"""The build's manifest: what ``specgen build`` wrote and how to launch it.

``DIR/manifest.json`` lists one record per (variant key, target): the
specialization (width, block-table width, block size, draft dtype), the
artifact path relative to DIR with its sha256, the entry symbol and its
parameter order, the argument list in ``docs/kernels.md`` order, the CUDA
launch geometry and the guards; ``plans`` holds, per boundary and layout, the
structured plan the build captured (read back as ``Plan`` records).  ``load_manifest`` reads and validates it; every
problem is a ``ManifestError`` naming the file and the field.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..specializations.expr import (
    GUARD_NAMES,
    SHAPE_NAMES,
    UnsafeExpressionError,
    bare_axis,
    expression_names,
    validate_expression,
)
from ..specializations.families import ARG_DTYPES
from ..specializations.plan import Plan, PlanError
from ..specializations.targets import TARGET_NAMES as TARGETS
from ..specializations.targets import TARGETS as TARGET_ROWS
from ..specializations.variants import ANY_WIDTH, Layout, VariantSpec, variants_command
from .cubin import SCALARS, entry_problems

SCHEMA_VERSION = 2  # 2: plans carry structured steps and their layout
MANIFEST_NAME = "manifest.json"
_REQUIRED = ("key", "family", "width", "target", "artifact", "sha256", "entry", "params", "args")


class ManifestError(ValueError):
    """manifest.json is missing, unreadable or does not follow the schema."""


class ArtifactError(RuntimeError):
    """A built artifact is missing, altered since the build, or unfit for this device."""


@dataclass(frozen=True, slots=True)
class ArgEntry:
    name: str
    dtype: str
    shape: str
    output: bool = False


@dataclass(frozen=True, slots=True)
class VariantEntry:
    key: str
    family: str
    target: str
    width: int
    block_table_width: int | None
    block_size: int | None
    draft_dtype: str
    num_splits: int | None
    arch: str | None
    artifact: str
    sha256: str
    entry: str
    params: tuple[str, ...]
    args: tuple[ArgEntry, ...]
    threads: int
    grid: str
    guards: tuple[tuple[str, str], ...]
    boundaries: tuple[str, ...] = ()
    program: str | None = None
    source: str | None = None

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args if a.output)

    @property
    def fixed_width(self) -> int | None:
        """The width the variant is specialized for; None for one that serves every width (its key lacks W),
        whose launches read ``W`` from the tensors (``guards.width_of``) where its shapes name it."""
        return None if self.width == ANY_WIDTH else self.width

    @property
    def variant(self) -> VariantSpec:
        return VariantSpec(
            self.family, self.width, self.block_table_width, self.block_size, self.draft_dtype, self.num_splits
        )


@dataclass(frozen=True, slots=True)
class Manifest:
    path: Path
    schema_version: int
    specgen_version: str
    tilelang_version: str | None
    targets: tuple[str, ...]
    variants: tuple[VariantEntry, ...]
    plans: dict  # boundary -> layout key -> the plan record as written
    parsed_plans: tuple[Plan, ...] = ()

    @property
    def root(self) -> Path:
        return self.path.parent

    def plan(self, boundary: str, layout: Layout) -> Plan | None:
        """The plan the build made of ``boundary`` at ``layout``, or None."""
        return next((p for p in self.parsed_plans if p.boundary == boundary and p.layout == layout), None)

    def layouts(self, boundary: str) -> tuple[Layout, ...]:
        """Every layout the build planned ``boundary`` at, sorted."""
        return tuple(sorted(p.layout for p in self.parsed_plans if p.boundary == boundary))


def _need(rec: dict, field: str, where: str, kind: type | tuple) -> Any:
    if field not in rec:
        raise ManifestError(f"{where}: missing field {field!r}")
    value = rec[field]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        raise ManifestError(f"{where}: field {field!r} must be {kind}, got {value!r}")
    return value


def _opt_int(rec: dict, field: str, where: str) -> int | None:
    value = rec.get(field)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
        raise ManifestError(f"{where}: field {field!r} must be a positive int or null, got {value!r}")
    return value


def _parse_variant(rec: Any, where: str) -> VariantEntry:
    if not isinstance(rec, dict):
        raise ManifestError(f"{where}: a variant must be an object")
    for f in _REQUIRED:
        if f not in rec:
            raise ManifestError(f"{where}: missing field {f!r}")
    key = _need(rec, "key", where, str)
    where = f"{where} ({key})"
    target = _need(rec, "target", where, str)
    if target not in TARGETS:
        raise ManifestError(f"{where}: field 'target' must be one of {TARGETS}, got {target!r}")
    artifact = _need(rec, "artifact", where, str)
    if Path(artifact).is_absolute() or ".." in Path(artifact).parts:
        raise ManifestError(f"{where}: field 'artifact' must be a path inside the build folder, got {artifact!r}")
    params = tuple(_need(rec, "params", where, list))
    args = []
    for i, a in enumerate(_need(rec, "args", where, list)):
        aw = f"{where} args[{i}]"
        if not isinstance(a, dict):
            raise ManifestError(f"{aw}: must be an object")
        arg = ArgEntry(
            _need(a, "name", aw, str),
            _need(a, "dtype", aw, str),
            _need(a, "shape", aw, str),
            bool(a.get("output", False)),
        )
        if arg.dtype not in ARG_DTYPES:
            raise ManifestError(f"{aw}: field 'dtype' must be one of {', '.join(ARG_DTYPES)}, got {arg.dtype!r}")
        _check_expr(arg.shape, SHAPE_NAMES, f"{aw}: field 'shape'")
        args.append(arg)
    if not args:
        raise ManifestError(f"{where}: field 'args' is empty")
    missing = [n for n in params if n not in SCALARS and n not in {a.name for a in args}]
    if missing or sorted(n for n in params if n not in SCALARS) != sorted(a.name for a in args):
        raise ManifestError(f"{where}: field 'params' {list(params)} does not match the args")
    for dim in ("V", "C", "W"):
        if dim in params and all(bare_axis(a.shape, dim) is None for a in args):
            raise ManifestError(
                f"{where}: field 'params' passes {dim}, but no argument has an axis of extent {dim} to read it"
            )
    width = _need(rec, "width", where, int)
    if width < 0:
        raise ManifestError(f"{where}: field 'width' must be a width, or {ANY_WIDTH} for every width; got {width}")
    if width == ANY_WIDTH and any("W" in expression_names(a.shape) for a in args):
        if all(bare_axis(a.shape, "W") is None for a in args):
            raise ManifestError(
                f"{where}: field 'width' is {ANY_WIDTH} (every width), but no argument has an axis of extent W "
                "to read it"
            )
    launch = rec.get("launch") or {}
    guards = []
    for i, g in enumerate(rec.get("guards") or []):
        gw = f"{where} guards[{i}]"
        expr = _need(g, "expr", gw, str) if isinstance(g, dict) else None
        if expr is None:
            raise ManifestError(f"{gw}: must be an object with 'expr'")
        _check_expr(expr, GUARD_NAMES, f"{gw}: field 'expr'")
        guards.append((expr, str(g.get("why", ""))))
    grid = str(launch.get("grid", "B"))
    _check_expr(grid, SHAPE_NAMES, f"{where}: field 'launch.grid'")
    return VariantEntry(
        key=key,
        family=_need(rec, "family", where, str),
        target=target,
        width=width,
        block_table_width=_opt_int(rec, "block_table_width", where),
        block_size=_opt_int(rec, "block_size", where),
        draft_dtype=str(rec.get("draft_dtype") or "int32"),
        num_splits=_opt_int(rec, "num_splits", where),
        arch=rec.get("arch"),
        artifact=artifact,
        sha256=_need(rec, "sha256", where, str).lower(),
        entry=_need(rec, "entry", where, str),
        params=params,
        args=tuple(args),
        threads=int(launch.get("threads", 128)),
        grid=grid,
        guards=tuple(guards),
        boundaries=tuple(rec.get("boundaries") or ()),
        program=rec.get("program"),
        source=rec.get("source"),
    )


def _parse_plan(boundary: str, rec: Any, num_splits: int | None, where: str) -> Plan:
    """One plan record: its fields checked here (so the error names them), then read as a ``Plan``."""
    if not isinstance(rec, dict):
        raise ManifestError(f"{where}: a plan must be an object")
    layout = _need(rec, "layout", where, dict)
    for f in ("width", "block_table_width", "block_size"):
        _need(layout, f, f"{where} layout", int)
    for i, step in enumerate(_need(rec, "steps", where, list)):
        sw = f"{where} steps[{i}]"
        if not isinstance(step, dict):
            raise ManifestError(f"{sw}: must be an object")
        _need(step, "name", sw, str)
        if _need(step, "kind", sw, str) == "kernel":
            _need(step, "family", sw, str)
            _need(step, "key", sw, str)
    try:
        return Plan.from_dict(boundary, rec, num_splits)
    except PlanError as exc:
        raise ManifestError(f"{where}: {exc}") from None


def _check_expr(text: str, names: frozenset[str], where: str) -> None:
    try:
        validate_expression(text, names)
    except UnsafeExpressionError as exc:
        raise ManifestError(f"{where}: {exc}") from None


def parse_manifest(data: Any, path: Path) -> Manifest:
    where = str(path)
    if not isinstance(data, dict):
        raise ManifestError(f"{where}: top level must be an object")
    version = _need(data, "schema_version", where, int)
    if version != SCHEMA_VERSION:
        raise ManifestError(
            f"{where}: field 'schema_version' is {version}, this runtime reads {SCHEMA_VERSION}; "
            f"rebuild the folder with `specgen build`"
        )
    variants = tuple(
        _parse_variant(v, f"{where} variants[{i}]") for i, v in enumerate(_need(data, "variants", where, list))
    )
    seen = set()
    for v in variants:
        if (v.key, v.target) in seen:
            raise ManifestError(f"{where}: field 'variants' lists {v.key} for target {v.target} twice")
        seen.add((v.key, v.target))
    plans = data.get("plans") or {}
    if not isinstance(plans, dict):
        raise ManifestError(f"{where}: field 'plans' must be an object")
    num_splits = next((v.num_splits for v in variants if v.num_splits), None)
    parsed = []
    for boundary, by_layout in plans.items():
        if by_layout is not None and not isinstance(by_layout, dict):
            raise ManifestError(f"{where}: field 'plans[{boundary!r}]' must be an object")
        for key, rec in (by_layout or {}).items():
            parsed.append(_parse_plan(boundary, rec, num_splits, f"{where} plans[{boundary!r}][{key!r}]"))
    return Manifest(
        path=path,
        schema_version=version,
        specgen_version=str(data.get("specgen_version", "")),
        tilelang_version=data.get("tilelang_version"),
        targets=tuple(data.get("targets") or sorted({v.target for v in variants})),
        variants=variants,
        plans=dict(plans),
        parsed_plans=tuple(parsed),
    )


def load_manifest(path: str | Path) -> Manifest:
    """Read ``path`` (the manifest or its folder) and validate it."""
    path = Path(path)
    if path.is_dir():
        path = path / MANIFEST_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ManifestError(f"{path}: no manifest (run `specgen build`)") from None
    except (OSError, ValueError) as exc:
        raise ManifestError(f"{path}: cannot read: {exc}") from None
    return parse_manifest(data, path.resolve())


def read_artifact(entry: VariantEntry, root: Path) -> bytes:
    """The artifact's bytes, after checking them against the manifest's sha256."""
    path = Path(root) / entry.artifact
    try:
        blob = path.read_bytes()
    except OSError as exc:
        raise ArtifactError(f"{path}: artifact of {entry.key} ({entry.target}) cannot be read: {exc}") from None
    digest = hashlib.sha256(blob).hexdigest()
    if digest != entry.sha256:
        raise ArtifactError(
            f"{path}: sha256 {digest} does not match the manifest's {entry.sha256} "
            f"for {entry.key} ({entry.target}); rebuild it with `{rebuild_command(entry, root)}` "
            f"(the folder's other variants stay)"
        )
    return blob


def rebuild_command(entry: VariantEntry, root: Path) -> str:
    """The ``specgen build`` command that remakes ``entry`` in ``root`` (builds add to a folder).

    Variants of one family share an artifact; the command remakes every
    variant the folder's manifest lists in ``entry``'s artifact, and little else.
    """
    try:
        together = [
            e for e in load_manifest(root).variants if e.artifact == entry.artifact and e.target == entry.target
        ]
    except ManifestError:
        together = []
    return f"{variants_command([e.variant for e in together] or [entry.variant], entry.target)} --out {root}"


def _stamped(folder: Path, rel: str, suffix: str) -> list[VariantSpec]:
    """The variants whose build stamp (``<target>/<key>.json``) names the artifact ``rel``."""
    specs = []
    for f in sorted(folder.glob("*.json")):
        try:
            stamp = json.loads(f.read_text(encoding="utf-8"))
            named = stamp.get("artifact") or f"{folder.name}/{f.name[:-5]}{suffix}"  # stamps of older builds
            if named == rel:
                specs.append(VariantSpec.parse(f.name[:-5]))
        except (OSError, ValueError, AttributeError, LookupError):  # not a stamp of a specgen variant
            continue
    return specs


def _unlisted(root: Path, rel: str, target: str, suffix: str) -> str:
    """The problem line of an artifact on disk that the manifest does not list, with what clears it."""
    specs = _stamped(root / target, rel, suffix)
    if specs:  # its stamps are there: a build of exactly those variants finds them built and lists them
        cmd = f"{variants_command(specs, target)} --out {root}"
        return (
            f"{rel}: on disk but not in the manifest (a build that did not finish); run `{cmd}` "
            "to list it again, or delete the file"
        )
    return (
        f"{rel}: on disk but not in the manifest, and no build stamp names it, so no build lists it again; "
        "delete the file (the next build into this folder removes it)"
    )


def folder_problems(manifest: Manifest) -> list[str]:
    """Where the build folder disagrees with its manifest: artifacts missing, altered, or not listed.

    One line each, naming the file and what clears it; the sha256 of every
    listed artifact is checked, and each cuda entry against its cubin
    (``runtime/cubin.py``).
    """
    root, problems = manifest.root, []
    listed = set()
    for e in manifest.variants:
        listed.add(Path(e.artifact).as_posix())
        try:
            blob = read_artifact(e, root)
        except ArtifactError as exc:
            problems.append(str(exc).replace(f"{root}/", "", 1))
            continue
        if e.target == "cuda":
            problems += [f"{e.artifact}: {p} ({e.key})" for p in entry_problems(blob, e)]
    for name, target in TARGET_ROWS.items():
        folder = root / name
        if not folder.is_dir():
            continue
        for f in sorted(folder.glob(f"*{target.artifact_suffix}")):
            rel = f"{name}/{f.name}"
            if rel not in listed:
                problems.append(_unlisted(root, rel, name, target.artifact_suffix))
    return problems


class KernelLaunchError(RuntimeError):
    """The driver or the kernel's host entry reported a failure."""
