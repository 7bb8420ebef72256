"""``specgen build``'s back end: variant records -> artifacts, manifest and package.

It takes the ``VariantSpec`` records and ``Plan`` records that planning made
(``specgen.driver`` runs the passes first; codegen never does) and renders,
lowers and compiles each variant for each target.  Artifacts are
content-addressed (program text, target, arch, flags, toolchain versions): a
rebuild with nothing changed lowers and compiles nothing.  Workers lower one
variant per task and compile the variants of a family together, many per
compiler run, into one shared artifact (``batch.py``); the cache stays per
variant.  Files are made in the build's own staging folder and moved into
place only when complete; the manifest merge keeps what earlier builds made
(``folder.py``).
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import multiprocessing
import os
import shutil
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from ..specializations.families import FAMILIES
from ..specializations.matrix import Matrix
from ..specializations.plan import Plan
from ..specializations.targets import TARGETS
from ..specializations.variants import VariantSpec
from .batch import (
    MAX_BATCH,
    batches,
    cache_key,
    compile_job,
    guard_records,
    lower_job,
    read_stamp,
    remove_unreferenced,
    warm_worker,
)
from .folder import MANIFEST, STAGING, drop_empty_staging, folder_lock, merge, new_staging, read_manifest, sweep_staging
from .package import render_package_init
from .toolchain import renderer_digest, tilelang_version, toolchain

SCHEMA_VERSION = 2  # the runtime's manifest reader checks the same number


class BuildError(RuntimeError):
    pass


@dataclass
class BuildSummary:
    built: int = 0
    cached: int = 0
    failed: list[str] = field(default_factory=list)
    seconds: float = 0.0
    out: Path | None = None
    kept: int = 0  # variants other builds made that stay in the folder
    lower_s: float = 0.0  # seconds spent lowering, summed over the workers
    compile_s: float = 0.0  # seconds spent in compiler runs, summed over the workers
    compiler_runs: int = 0
    pool_s: float = 0.0  # seconds the workers were up
    tail_s: float = 0.0  # of those, seconds from the first moment a worker had nothing to take until the end

    def line(self) -> str:
        kept = f", {self.kept} kept from earlier builds" if self.kept else ""
        return (
            f"specgen build: {self.built} built, {self.cached} cached, {len(self.failed)} failed{kept} "
            f"in {self.seconds:.1f}s -> {self.out}"
        )


def _entry(spec: VariantSpec, target: str, stamp: dict, boundaries: set[str]) -> dict:
    from .lower import source_suffix

    fam = FAMILIES[spec.family]
    args = [
        {
            "name": a.name,
            "dtype": spec.draft_dtype if a.dtype == "draft" else a.dtype,
            "shape": a.shape,
            "output": a.output,
        }
        for a in fam.args
    ]
    return {
        "key": spec.key,
        "family": spec.family,
        "width": spec.width,
        "block_table_width": spec.block_table_width,
        "block_size": spec.block_size,
        "draft_dtype": spec.draft_dtype,
        "num_splits": spec.num_splits,
        "target": target,
        "arch": stamp.get("arch"),
        "artifact": stamp["artifact"],
        "sha256": stamp["sha256"],
        "entry": stamp["entry"],
        "params": stamp["params"],
        "args": args,
        "launch": {"threads": stamp["threads"], "grid": stamp["grid"]},
        "guards": stamp.get("guards") or guard_records(spec),
        "boundaries": sorted(boundaries),
        "program": f"{target}/{spec.key}.tl.py",
        "source": f"{target}/{spec.key}{source_suffix(target)}",
    }


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def build(
    specs: list[VariantSpec],
    needed_by: dict[str, set[str]],
    plans: list[Plan],
    matrix: Matrix,
    targets=("c",),
    out: str | Path = "build/specgen_kernels",
    arch: str | None = None,
    jobs: int = 1,
    families: tuple[str, ...] | None = None,
    progress=sys.stderr,
    *,
    version: str,
    replace: bool = False,
) -> BuildSummary:
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
        summary = _build(
            specs, needed_by, plans, matrix, targets, out, arch, jobs, families, progress, version, replace, stage
        )
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        drop_empty_staging(out)
    summary.seconds = time.perf_counter() - t0
    return summary


def _build(
    specs, needed_by, plans, matrix, targets, out: Path, arch, jobs, families, progress, version, replace, stage: Path
) -> BuildSummary:
    specs = {s.key: s for s in specs if not families or s.family in families}
    todo, done, stamps, shas, renderer = [], {}, {}, {}, renderer_digest()
    for target in targets:
        tool = toolchain(target, arch if target == "cuda" else None)
        for spec in specs.values():
            stamp = read_stamp(out, target, spec.key, shas)
            rk = cache_key(repr(spec), target, dict(tool, renderer=renderer))
            if stamp and stamp.get("render_key") == rk and stamp.get("guards"):  # same inputs: same program
                done[(spec.key, target)] = stamp | {"status": "cached", "seconds": 0.0}
                continue
            # rendered in a worker: a program whose cache key matches the stamp's is not lowered again
            stamps[(spec.key, target)] = stamp
            todo.append(
                {
                    "target": target,
                    "key": spec.key,
                    "family": spec.family,
                    "spec": spec,
                    "tool": tool,
                    "render_key": rk,
                    "stamp_cache_key": stamp and stamp.get("cache_key"),
                }
            )
    summary = BuildSummary(cached=len(done), out=out)
    total = len(done) + len(todo)
    _progress(progress, len(done), total, "cached", f"{len(done)} variant(s) up to date")
    if todo:
        _run(
            todo,
            out,
            stage,
            jobs,
            done,
            stamps,
            summary,
            lambda msg: _progress(progress, len(done) + len(summary.failed), total, "", msg),
        )
    plan_records: dict[str, dict] = {}
    for plan in plans:
        plan_records.setdefault(plan.boundary, {})[plan.layout.key] = plan.as_dict()
    with folder_lock(out):
        _refresh_stamps(out, done)
        # the stamps on disk, read under the lock: another build may have moved its own copy in since
        entries = [
            _entry(specs[k], t, read_stamp(out, t, k) or stamp, needed_by.get(k, set()))
            for (k, t), stamp in sorted(done.items())
        ]
        made = {
            "schema_version": SCHEMA_VERSION,
            "specgen_version": version,
            "tilelang_version": tilelang_version(),
            "targets": sorted(set(targets)),
            "matrix": {
                "widths": list(matrix.widths),
                "block_table_widths": list(matrix.block_table_widths),
                "block_sizes": list(matrix.block_sizes),
                "draft_dtypes": list(matrix.draft_dtypes),
                "num_splits": matrix.num_splits,
            },
            "plans": plan_records,
            "variants": entries,
        }
        old, why_not = read_manifest(out)
        manifest, notes = merge(old, made, out, SCHEMA_VERSION, replace=replace)
        notes = [why_not] * bool(why_not) + notes
        _write_atomic(out / MANIFEST, json.dumps(manifest, sort_keys=True, indent=1) + "\n")
        _write_atomic(out / "__init__.py", render_package_init(manifest))
        remove_unreferenced(out, TARGETS, {v["artifact"] for v in manifest["variants"]})
    for n in notes:
        _note(progress, n)
    summary.kept = len(manifest["variants"]) - len(entries)
    return summary


def _run(
    todo: list[dict], out: Path, stage: Path, jobs: int, done: dict, stamps: dict, summary: BuildSummary, report
) -> None:
    """Render and lower ``todo`` one variant per task; compile each family's variants in batches.

    The pool holds at most one task more than it has workers, and a batch
    whose variants are all lowered goes ahead of the lowering still queued, so
    compiler runs interleave with lowering instead of queueing behind it.
    """
    from .lower import batchable

    groups: dict[tuple[str, str], list[dict]] = {}
    for j in todo:
        groups.setdefault((j["target"], j["family"]), []).append(j)
    waiting = {}  # (key, target) -> its batch: the keys still being lowered and the members lowered
    for (target, _), group in groups.items():
        for keys in batches([j["key"] for j in group], MAX_BATCH if batchable(target) else 1):
            batch = {"keys": set(keys), "members": []}
            for k in keys:
                waiting[(k, target)] = batch
    lowers = deque(j for g in groups.values() for j in g)
    compiles: deque[dict] = deque()
    workers = max(1, min(jobs, len(todo)))
    ctx = multiprocessing.get_context("spawn")
    t0, tail = time.perf_counter(), None
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=warm_worker) as pool:
        pending: dict = {}

        def fill() -> None:
            while len(pending) <= workers and (compiles or lowers):
                if compiles:
                    job = compiles.popleft()
                    pending[pool.submit(compile_job, job)] = ("compile", job)
                else:
                    j = lowers.popleft()
                    pending[pool.submit(lower_job, j)] = ("lower", j)

        fill()
        while pending:
            finished, _ = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
            for fut in finished:
                kind, j = pending.pop(fut)
                if kind == "compile":
                    _compiled(fut, j, done, summary, report)
                    continue
                batch = waiting.pop((j["key"], j["target"]))
                batch["keys"].discard(j["key"])
                try:
                    result = fut.result()
                except Exception as e:  # noqa: BLE001  a failed variant is reported, the others go on
                    _failed(summary, j, e, report)
                else:
                    if result.get("cached"):  # the rendered program is the one already built
                        done[(j["key"], j["target"])] = stamps[(j["key"], j["target"])] | {
                            "status": "cached",
                            "seconds": 0.0,
                            "refresh": {"render_key": j["render_key"], "guards": result["guards"]},
                        }
                        summary.cached += 1
                    else:
                        batch["members"].append(dict(j, **result))
                if not batch["keys"] and batch["members"]:
                    compiles.append(
                        {
                            "out": str(out),
                            "stage": str(stage),
                            "target": j["target"],
                            "family": j["family"],
                            "members": batch["members"],
                        }
                    )
            fill()
            if tail is None and len(pending) < workers:
                tail = time.perf_counter()
    summary.pool_s = time.perf_counter() - t0
    summary.tail_s = summary.pool_s - ((tail or t0) - t0)


def _refresh_stamps(out: Path, done: dict) -> None:
    """Record the render key in the stamps of variants whose re-rendered program was unchanged.

    The next build then finds them up to date without rendering.  Run under
    the folder lock; a stamp that another build has replaced since is left alone.
    """
    for (key, target), stamp in done.items():
        if "refresh" not in stamp:
            continue
        path = out / target / f"{key}.json"
        try:
            on_disk = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(on_disk, dict) and on_disk.get("cache_key") == stamp.get("cache_key"):
            _write_atomic(path, json.dumps(dict(on_disk, **stamp["refresh"]), sort_keys=True, indent=1))


def _compiled(fut, job: dict, done: dict, summary: BuildSummary, report) -> None:
    target = job["target"]
    try:
        result = fut.result()
    except Exception as e:  # noqa: BLE001  the batch could not be put in place: each of its variants failed
        for m in job["members"]:
            _failed(summary, m, e, report)
        return
    summary.compile_s += result["compile_s"]
    summary.compiler_runs += result["runs"]
    share = result["compile_s"] / max(1, len(job["members"]))
    for m in job["members"]:
        summary.lower_s += m["lower_s"]
        if m["key"] in result["stamps"]:
            done[(m["key"], target)] = result["stamps"][m["key"]] | {"status": "built"}
            summary.built += 1
            report(f"built {m['key']} ({target}) {m['lower_s'] + share:.1f}s")
        else:
            _failed(summary, m, RuntimeError(result["failed"].get(m["key"], "not compiled")), report)


def _failed(summary: BuildSummary, job: dict, e: BaseException, report) -> None:
    summary.failed.append(f"{job['key']} ({job['target']}): {str(e) or repr(e)}")  # the compiler's own lines too
    report(f"FAILED {job['key']} ({job['target']})")


def _note(stream, message: str) -> None:
    if stream is not None:
        stream.write(f"specgen build: {message}\n")
        stream.flush()


def _progress(stream, n: int, total: int, _kind: str, message: str) -> None:
    if stream is None or total == 0:
        return
    width = 24
    filled = int(width * n / total)
    stream.write(f"[{'#' * filled}{'.' * (width - filled)}] {n:3d}/{total} {message}\n")
    stream.flush()
