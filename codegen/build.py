"""``specgen build``'s back end: variant records -> artifacts, manifest and package.

It takes the ``VariantSpec`` records and ``Plan`` records that planning made
(``specgen.driver`` runs the passes first; codegen never does) and renders,
lowers and compiles each variant for each target.  Artifacts are
content-addressed (program text, target, arch, flags, toolchain versions): a
rebuild with nothing changed lowers and compiles nothing.  Each variant is
built in the build's own staging folder and moved into place only when
complete; the manifest merge keeps what earlier builds made (``folder.py``).
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

from ..specializations.families import FAMILIES
from ..specializations.matrix import Matrix
from ..specializations.plan import Plan
from ..specializations.variants import VariantSpec
from .folder import (MANIFEST, STAGING, drop_empty_staging, folder_lock, merge, new_staging, read_manifest,
                     sweep_staging)
from .guards import guards
from .package import render_package_init
from .templates import render_variant

SCHEMA_VERSION = 2  # the runtime's manifest reader checks the same number
FLAGS_VERSION = 1  # bump when compile flags change


class BuildError(RuntimeError):
    pass


def _toolchain(target: str, arch: str | None) -> dict:
    """What goes into the cache key besides the program; a missing compiler stops the build here."""
    import subprocess

    from .lower import compiler

    cc = compiler(target)  # raises ToolchainMissing with what to install
    lines = subprocess.run([cc, "--version"], capture_output=True, text=True, check=False).stdout.splitlines()
    lines = [ln for ln in lines if ln.strip()] or ["unknown"]
    return {"tilelang": _tilelang_version(), "compiler": cc, "arch": arch, "flags_version": FLAGS_VERSION,
            "compiler_version": lines[-1] if cc == "nvcc" else lines[0]}


def _cache_key(program: str, target: str, toolchain: dict) -> str:
    blob = json.dumps({"program": program, "target": target, "toolchain": toolchain}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_one(job: dict) -> dict:
    """Lower and compile one variant into ``out/target/``; runs in a worker process.

    The files are made in the build's own staging folder and moved into place
    under the folder lock, the stamp last: an artifact without a matching
    stamp is never trusted.
    """
    from .lower import artifact_suffix, compile_artifact, lower, source_suffix

    out, target, key = Path(job["out"]), job["target"], job["key"]
    final = out / target
    stage = Path(job["stage"]) / f"{key}-{target}"
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
        with folder_lock(out):
            final.mkdir(parents=True, exist_ok=True)
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
    kept: int = 0  # variants other builds made that stay in the folder

    def line(self) -> str:
        kept = f", {self.kept} kept from earlier builds" if self.kept else ""
        return (f"specgen build: {self.built} built, {self.cached} cached, {len(self.failed)} failed{kept} "
                f"in {self.seconds:.1f}s -> {self.out}")


def _entry(spec: VariantSpec, target: str, stamp: dict, boundaries: set[str]) -> dict:
    from .lower import artifact_suffix, source_suffix

    fam = FAMILIES[spec.family]
    args = [{"name": a.name, "dtype": spec.draft_dtype if a.dtype == "draft" else a.dtype,
             "shape": a.shape, "output": a.output} for a in fam.args]
    return {
        "key": spec.key, "family": spec.family, "width": spec.width,
        "block_table_width": spec.block_table_width, "block_size": spec.block_size,
        "draft_dtype": spec.draft_dtype, "num_splits": spec.num_splits, "target": target,
        "arch": stamp.get("arch"), "artifact": f"{target}/{spec.key}{artifact_suffix(target)}",
        "sha256": stamp["sha256"], "entry": stamp["entry"], "params": stamp["params"], "args": args,
        "launch": {"threads": stamp["threads"], "grid": stamp["grid"]},
        "guards": [{"expr": g.expr, "why": g.why} for g in guards(spec)],
        "boundaries": sorted(boundaries), "program": f"{target}/{spec.key}.tl.py",
        "source": f"{target}/{spec.key}{source_suffix(target)}",
    }


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def build(specs: list[VariantSpec], needed_by: dict[str, set[str]], plans: list[Plan], matrix: Matrix,
          targets=("c",), out: str | Path = "build/specgen_kernels", arch: str | None = None, jobs: int = 1,
          families: tuple[str, ...] | None = None, progress=sys.stderr, *, version: str,
          replace: bool = False) -> BuildSummary:
    """Render, lower and compile ``specs`` for ``targets`` into ``out``; merge the manifest, write the package.

    The folder keeps the variants other builds put there (``replace`` drops
    them); ``version`` is the specgen release the manifest records.
    """
    t0 = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with folder_lock(out):
        swept = sweep_staging(out)
    if swept:
        _note(progress, f"removed {len(swept)} staging folder(s) that interrupted builds left in {out / STAGING}")
    stage = new_staging(out)
    try:
        summary = _build(specs, needed_by, plans, matrix, targets, out, arch, jobs, families, progress, version,
                         replace, stage)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        drop_empty_staging(out)
    summary.seconds = time.perf_counter() - t0
    return summary


def _build(specs, needed_by, plans, matrix, targets, out: Path, arch, jobs, families, progress, version, replace,
           stage: Path) -> BuildSummary:
    specs = {s.key: s for s in specs if not families or s.family in families}
    jobs_todo, done = [], {}
    for target in targets:
        tool = _toolchain(target, arch if target == "cuda" else None)
        for spec in specs.values():
            program = render_variant(spec, target)
            ck = _cache_key(program, target, tool)
            stamp = _cached(out, target, spec.key, ck)
            if stamp:
                done[(spec.key, target)] = stamp
            else:
                jobs_todo.append({"out": str(out), "stage": str(stage), "target": target, "key": spec.key,
                                  "program": program, "arch": tool["arch"], "cache_key": ck})
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
    plan_records: dict[str, dict] = {}
    for plan in plans:
        plan_records.setdefault(plan.boundary, {})[plan.layout.key] = plan.as_dict()
    with folder_lock(out):
        # the stamps on disk, read under the lock: another build may have moved its own copy in since
        entries = [_entry(specs[k], t, _on_disk(out, t, k) or stamp, needed_by.get(k, set()))
                   for (k, t), stamp in sorted(done.items())]
        made = {"schema_version": SCHEMA_VERSION, "specgen_version": version,
                "tilelang_version": _tilelang_version(), "targets": sorted(set(targets)),
                "matrix": {"widths": list(matrix.widths), "block_table_widths": list(matrix.block_table_widths),
                           "block_sizes": list(matrix.block_sizes), "draft_dtypes": list(matrix.draft_dtypes),
                           "num_splits": matrix.num_splits},
                "plans": plan_records, "variants": entries}
        old, why_not = read_manifest(out)
        manifest, notes = merge(old, made, out, SCHEMA_VERSION, replace=replace)
        notes = [why_not] * bool(why_not) + notes
        _write_atomic(out / MANIFEST, json.dumps(manifest, sort_keys=True, indent=1) + "\n")
        _write_atomic(out / "__init__.py", render_package_init(manifest))
    for n in notes:
        _note(progress, n)
    summary.kept = len(manifest["variants"]) - len(entries)
    return summary


def _on_disk(out: Path, target: str, key: str) -> dict | None:
    """The build stamp in ``out`` for ``key``, if its artifact matches it."""
    from .lower import artifact_suffix

    try:
        stamp = json.loads((out / target / f"{key}.json").read_text())
        if _sha256(out / target / f"{key}{artifact_suffix(target)}") == stamp.get("sha256"):
            return stamp
    except (OSError, ValueError):
        pass
    return None


def _note(stream, message: str) -> None:
    if stream is not None:
        stream.write(f"specgen build: {message}\n")
        stream.flush()


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
