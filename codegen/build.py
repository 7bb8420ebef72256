"""``specgen build``: plans -> kernel variants -> artifacts, manifest and package.

The build is the back end of the compiler: it runs the pass pipeline on each
requested boundary for each layout of the matrix and generates exactly the
kernel families the fused ops of the resulting plans name.  Artifacts are
content-addressed (program text, target, arch, flags, toolchain versions): a
rebuild with nothing changed lowers and compiles nothing.  Each variant is
built in a staging folder and moved into place only when complete.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
import multiprocessing
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__
from ..specializations import Matrix
from . import indexing
from .families import FAMILIES, shape_of, variant_key  # noqa: F401  (shape_of re-exported for tools)
from .templates import render_program

SCHEMA_VERSION = 1
FLAGS_VERSION = 1  # bump when compile flags change
TARGETS = ("c", "cuda", "ascend")
BOUNDARY_NAMES = ("draft-to-verify", "verify-to-draft", "context-kv")


class BuildError(RuntimeError):
    pass


@dataclass
class VariantSpec:
    key: str
    family: str
    width: int
    block_table_width: int | None
    block_size: int | None
    draft_dtype: str
    num_splits: int | None
    boundaries: set[str] = field(default_factory=set)


def plan_variants(matrix: Matrix, boundaries=BOUNDARY_NAMES) -> tuple[dict[str, VariantSpec], dict]:
    """Run the pipeline on every boundary x layout; the fused ops name the variants."""
    from ..passes.boundaries import build_boundary
    from ..passes.manager import run_pipeline
    from ..passes.render import summary

    specs: dict[str, VariantSpec] = {}
    plans: dict[str, dict] = {}
    for name in boundaries:
        for w, bt, bs, dtype in matrix.layouts():
            after, _ = run_pipeline(build_boundary(name, width=w, batch=1, block_size=bs,
                                                   block_table_width=bt, draft_dtype=dtype))
            s = summary(after)
            plans.setdefault(name, {})[f"w{w}_bt{bt}_bs{bs}_{dtype}"] = {
                "graph_ops": s["graph_ops"], "kernel_families": [f["key"] for f in s["kernel_families"]]}
            for f in s["kernel_families"]:
                # a composite's members are built too, for engines that launch the steps one by one
                for family in (f["family"], *FAMILIES[f["family"]].members):
                    fam = FAMILIES[family]
                    key = variant_key(family, w, bt, bs, dtype)
                    spec = specs.setdefault(key, VariantSpec(
                        key, family, w, bt if "BT" in fam.key_params else None,
                        bs if "BS" in fam.key_params else None,
                        dtype if fam.has_draft_dtype else "int32",
                        matrix.num_splits if fam.uses_num_splits else None))
                    spec.boundaries.add(name)
    return dict(sorted(specs.items())), plans


def _toolchain(target: str, arch: str | None) -> dict:
    """What goes into the cache key besides the program; a missing compiler stops the build here."""
    import subprocess

    from .lower import _compiler

    cc = _compiler(target)  # raises ToolchainMissing with what to install
    lines = subprocess.run([cc, "--version"], capture_output=True, text=True, check=False).stdout.splitlines()
    lines = [ln for ln in lines if ln.strip()] or ["unknown"]
    return {"tilelang": _tilelang_version(), "compiler": cc, "arch": arch, "flags_version": FLAGS_VERSION,
            "compiler_version": lines[-1] if cc == "nvcc" else lines[0]}


def _plan_cache_key(matrix: Matrix, boundaries) -> str:
    """Plans depend on the matrix and on the passes' own source: hash both."""
    src = Path(__file__).resolve().parent.parent / "passes"
    h = hashlib.sha256(json.dumps([repr(matrix), list(boundaries), __version__]).encode())
    for f in sorted(src.glob("*.py")):
        h.update(f.read_bytes())
    h.update((Path(__file__).resolve().parent / "families.py").read_bytes())
    return h.hexdigest()


def cached_plans(out: Path, matrix: Matrix, boundaries) -> tuple[dict[str, VariantSpec], dict]:
    """``plan_variants``, remembered in the build folder (planning imports torch and runs 3 x layouts pipelines)."""
    key = _plan_cache_key(matrix, boundaries)
    path = out / ".plans.json"
    try:
        data = json.loads(path.read_text())
        if data["key"] == key:
            specs = {k: VariantSpec(**(v | {"boundaries": set(v["boundaries"])})) for k, v in data["specs"].items()}
            return specs, data["plans"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    specs, plans = plan_variants(matrix, boundaries)
    blob = {"key": key, "plans": plans,
            "specs": {k: {**vars(s), "boundaries": sorted(s.boundaries)} for k, s in specs.items()}}
    _write_atomic(path, json.dumps(blob, sort_keys=True))
    return specs, plans


def _cache_key(program: str, target: str, toolchain: dict) -> str:
    blob = json.dumps({"program": program, "target": target, "toolchain": toolchain}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_one(job: dict) -> dict:
    """Lower and compile one variant into ``out/target/``; runs in a worker process."""
    from .lower import artifact_suffix, compile_artifact, lower, source_suffix

    out, target, key = Path(job["out"]), job["target"], job["key"]
    final = out / target
    stage = out / ".staging" / f"{key}-{job['cache_key'][:12]}-{os.getpid()}"
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    try:
        t0 = time.perf_counter()
        lowered = lower(job["program"], target, job["arch"])
        (stage / f"{key}.tl.py").write_text(job["program"])
        (stage / f"{key}{source_suffix(target)}").write_text(lowered.source)
        compile_artifact(lowered, stage / f"{key}{artifact_suffix(target)}")
        stamp = {"cache_key": job["cache_key"], "entry": lowered.entry, "params": lowered.params,
                 "threads": lowered.threads, "grid": lowered.grid, "arch": lowered.arch,
                 "sha256": _sha256(stage / f"{key}{artifact_suffix(target)}")}
        (stage / f"{key}.json").write_text(json.dumps(stamp, sort_keys=True, indent=1))
        final.mkdir(parents=True, exist_ok=True)
        # the stamp moves last: an artifact without a matching stamp is never trusted
        for suffix in (".tl.py", source_suffix(target), artifact_suffix(target), ".json"):
            os.replace(stage / f"{key}{suffix}", final / f"{key}{suffix}")
        return stamp | {"status": "built", "seconds": time.perf_counter() - t0}
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _cached(out: Path, target: str, key: str, cache_key: str) -> dict | None:
    from .lower import artifact_suffix

    stamp_path = out / target / f"{key}.json"
    art = out / target / f"{key}{artifact_suffix(target)}"
    try:
        stamp = json.loads(stamp_path.read_text())
    except (OSError, ValueError):
        return None
    if stamp.get("cache_key") != cache_key or not art.exists() or _sha256(art) != stamp.get("sha256"):
        return None
    return stamp | {"status": "cached", "seconds": 0.0}


@dataclass
class BuildSummary:
    built: int = 0
    cached: int = 0
    failed: list[str] = field(default_factory=list)
    seconds: float = 0.0
    out: Path | None = None

    def line(self) -> str:
        return (f"specgen build: {self.built} built, {self.cached} cached, {len(self.failed)} failed "
                f"in {self.seconds:.1f}s -> {self.out}")


def _entry(spec: VariantSpec, target: str, stamp: dict, matrix: Matrix) -> dict:
    from .lower import artifact_suffix, source_suffix

    fam = FAMILIES[spec.family]
    args = [{"name": a.name, "dtype": spec.draft_dtype if a.dtype == "draft" else a.dtype,
             "shape": a.shape, "output": a.output} for a in fam.args]
    guards = [{"expr": g.expr, "why": g.why}
              for g in indexing.guards(spec.family, spec.width, spec.block_table_width, spec.block_size)]
    return {
        "key": spec.key, "family": spec.family, "width": spec.width,
        "block_table_width": spec.block_table_width, "block_size": spec.block_size,
        "draft_dtype": spec.draft_dtype, "num_splits": spec.num_splits, "target": target,
        "arch": stamp.get("arch"), "artifact": f"{target}/{spec.key}{artifact_suffix(target)}",
        "sha256": stamp["sha256"], "entry": stamp["entry"], "params": stamp["params"], "args": args,
        "launch": {"threads": stamp["threads"], "grid": stamp["grid"]}, "guards": guards,
        "boundaries": sorted(spec.boundaries), "program": f"{target}/{spec.key}.tl.py",
        "source": f"{target}/{spec.key}{source_suffix(target)}",
    }


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def build(matrix: Matrix, targets=("c",), out: str | Path = "build/specgen_kernels", arch: str | None = None,
          jobs: int = 1, boundaries=BOUNDARY_NAMES, families: tuple[str, ...] | None = None,
          progress=sys.stderr) -> BuildSummary:
    t0 = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    specs, plans = cached_plans(out, matrix, boundaries)
    if families:
        specs = {k: s for k, s in specs.items() if s.family in families}
    jobs_todo, done = [], {}
    for target in targets:
        tool = _toolchain(target, arch if target == "cuda" else None)
        for spec in specs.values():
            program = render_program(spec.family, spec.width, spec.block_table_width, spec.block_size,
                                     spec.draft_dtype, spec.num_splits or matrix.num_splits, target=target)
            ck = _cache_key(program, target, tool)
            stamp = _cached(out, target, spec.key, ck)
            if stamp:
                done[(spec.key, target)] = stamp
            else:
                jobs_todo.append({"out": str(out), "target": target, "key": spec.key, "program": program,
                                  "arch": tool["arch"], "cache_key": ck})
    summary = BuildSummary(cached=len(done), out=out)
    total = len(done) + len(jobs_todo)
    _progress(progress, len(done), total, "cached", f"{len(done)} variant(s) up to date")
    if jobs_todo:
        ctx = multiprocessing.get_context("spawn")
        with cf.ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=ctx) as pool:
            futures = {pool.submit(build_one, j): j for j in jobs_todo}
            for fut in cf.as_completed(futures):
                j = futures[fut]
                try:
                    done[(j["key"], j["target"])] = fut.result()
                    summary.built += 1
                    status = f"built {j['key']} ({j['target']}) {done[(j['key'], j['target'])]['seconds']:.1f}s"
                except Exception as e:  # noqa: BLE001  a failed variant is reported, the others go on
                    summary.failed.append(f"{j['key']} ({j['target']}): {str(e).splitlines()[0] if str(e) else e!r}")
                    status = f"FAILED {j['key']} ({j['target']})"
                _progress(progress, len(done) + len(summary.failed), total, "", status)
    entries = [_entry(specs[k], t, stamp, matrix) for (k, t), stamp in sorted(done.items())]
    manifest = {"schema_version": SCHEMA_VERSION, "specgen_version": __version__,
                "tilelang_version": _tilelang_version(), "targets": sorted(set(targets)),
                "matrix": {"widths": list(matrix.widths), "block_table_widths": list(matrix.block_table_widths),
                           "block_sizes": list(matrix.block_sizes), "draft_dtypes": list(matrix.draft_dtypes),
                           "num_splits": matrix.num_splits},
                "plans": plans, "variants": entries}
    from ..runtime.library import render_package_init

    _write_atomic(out / "manifest.json", json.dumps(manifest, sort_keys=True, indent=1) + "\n")
    _write_atomic(out / "__init__.py", render_package_init(manifest))
    shutil.rmtree(out / ".staging", ignore_errors=True)
    summary.seconds = time.perf_counter() - t0
    return summary


def _tilelang_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tilelang")
    except PackageNotFoundError:
        return None


def _progress(stream, n: int, total: int, _kind: str, message: str) -> None:
    if stream is None or total == 0:
        return
    width = 24
    filled = int(width * n / total)
    stream.write(f"[{'#' * filled}{'.' * (width - filled)}] {n:3d}/{total} {message}\n")
    stream.flush()
