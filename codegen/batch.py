"""The build's work in worker processes: lower one variant at a time, compile many per compiler run.

Lowering (TileLang's pass pipeline) costs most of a cold build and varies
from variant to variant, so rendering and lowering are handed out one variant
per task to workers that stay warm for the whole build (TileLang is imported
once per worker, when the worker starts).  A compiler run costs about as much for
one kernel as for a dozen (start-up and headers), so the lowered variants of
one family and target are compiled together, ``MAX_BATCH`` at a time, into
one artifact: a shared library (c) or a cubin (cuda) with one entry per
variant, named after the variant's key.

Each variant keeps its own build stamp (``<target>/<key>.json``: cache key,
entry, artifact, sha256), its program and its source; a rebuild with one
variant changed recompiles that variant alone, into an artifact of its own.
Artifacts are named by the cache keys they hold (``<family>-<digest>``): two
builds making the same batch make the same file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

from .folder import folder_lock

MAX_BATCH = 16  # variants per compiler run; a failed run is retried one variant at a time


def warm_worker() -> None:
    """A worker's start: import TileLang and the renderer once, before its first task arrives."""
    try:
        from . import lower, templates

        lower._tilelang()
        templates._environment()
    except Exception:  # noqa: BLE001  a missing toolchain is reported by the task that needs it
        pass


def cache_key(program: str, target: str, toolchain: dict) -> str:
    """The content address of one variant's artifact: program text, target, toolchain."""
    blob = json.dumps({"program": program, "target": target, "toolchain": toolchain}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def guard_records(spec) -> list[dict]:
    from .guards import guards

    return [{"expr": g.expr, "why": g.why} for g in guards(spec)]


def lower_job(job: dict) -> dict:
    """Render and lower one variant (a worker task).

    ``job``: spec, target, tool (the toolchain record), key, and
    ``stamp_cache_key``, the cache key of the variant's artifact in the
    folder, if any.  A program whose cache key equals it is not lowered
    (``cached``); else the result holds the program, its cache key and
    guards, the ``Lowered`` record and the seconds lowering took.
    """
    from .lower import lower
    from .templates import render_variant

    t0 = time.perf_counter()
    program = render_variant(job["spec"], job["target"])
    ck = cache_key(program, job["target"], job["tool"])
    if ck == job.get("stamp_cache_key"):
        return {"cached": True, "guards": guard_records(job["spec"])}
    lowered = lower(program, job["target"], job["tool"]["arch"], symbol=job["key"])
    return {
        "program": program,
        "cache_key": ck,
        "guards": guard_records(job["spec"]),
        "lowered": lowered,
        "lower_s": time.perf_counter() - t0,
    }


def batches(keys: list[str], size: int = MAX_BATCH) -> list[list[str]]:
    """``keys`` (one family and target) cut into compiler runs of at most ``size``, as even as possible."""
    if not keys:
        return []
    n = -(-len(keys) // size)
    q, r = divmod(len(keys), n)  # r runs of q + 1, the rest of q
    bounds = [i * q + min(i, r) for i in range(n + 1)]
    return [keys[a:b] for a, b in zip(bounds, bounds[1:])]


def artifact_name(family: str, cache_keys: list[str], suffix: str) -> str:
    digest = hashlib.sha256("\n".join(sorted(cache_keys)).encode()).hexdigest()[:16]
    return f"{family}-{digest}{suffix}"


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def compile_job(job: dict) -> dict:
    """Compile the lowered variants of one batch into one artifact and move it and their files into place.

    ``job``: out, stage, target, family, members (key, cache_key, program,
    lowered).  Returns ``stamps`` (key -> stamp), ``failed`` (key -> message),
    ``compile_s`` and ``runs`` (compiler runs).  When the batch does not
    compile, each variant is compiled alone so that one bad variant fails alone.
    """
    from .lower import artifact_suffix, compile_many, source_suffix

    out, target = Path(job["out"]), job["target"]
    members = job["members"]
    suffix = artifact_suffix(target)
    stage = Path(job["stage"]) / artifact_name(job["family"], [m["cache_key"] for m in members], "")
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    t0, runs, made, failed = time.perf_counter(), 0, [], {}
    try:
        groups = [members]
        while groups:
            group = groups.pop(0)
            name = artifact_name(job["family"], [m["cache_key"] for m in group], suffix)
            try:
                runs += 1
                compile_many([m["lowered"] for m in group], stage / name)
                made.append((name, group))
            except Exception as e:  # noqa: BLE001  the compiler's message goes to the variant
                if len(group) > 1:
                    groups.extend([m] for m in group)
                else:
                    failed[group[0]["key"]] = str(e)
        stamps = {}
        for name, group in made:
            sha = sha256_file(stage / name)
            for m in group:
                low = m["lowered"]
                (stage / f"{m['key']}.tl.py").write_text(m["program"])
                (stage / f"{m['key']}{source_suffix(target)}").write_text(low.source)
                stamps[m["key"]] = {
                    "cache_key": m["cache_key"],
                    "entry": low.entry,
                    "params": low.params,
                    "threads": low.threads,
                    "grid": low.grid,
                    "arch": low.arch,
                    "artifact": f"{target}/{name}",
                    "sha256": sha,
                    "render_key": m.get("render_key"),
                    "guards": m.get("guards"),
                }
                (stage / f"{m['key']}.json").write_text(json.dumps(stamps[m["key"]], sort_keys=True, indent=1))
        compile_s = time.perf_counter() - t0
        with folder_lock(out):
            final = out / target
            final.mkdir(parents=True, exist_ok=True)
            for name, group in made:  # the artifact first, each stamp last: a stamp names a file in place
                os.replace(stage / name, final / name)
                for m in group:
                    for ext in (".tl.py", source_suffix(target), ".json"):
                        os.replace(stage / f"{m['key']}{ext}", final / f"{m['key']}{ext}")
        return {"stamps": stamps, "failed": failed, "compile_s": compile_s, "runs": runs}
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def read_stamp(out: Path, target: str, key: str, shas: dict | None = None) -> dict | None:
    """The build stamp of ``key`` in ``out`` if the artifact it names is there and matches its sha256.

    ``shas`` memoises artifact digests (path -> sha256) across the variants that share one.
    """
    from .lower import artifact_suffix

    try:
        stamp = json.loads((out / target / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(stamp, dict):
        return None
    rel = stamp.get("artifact") or f"{target}/{key}{artifact_suffix(target)}"  # stamps of older builds
    if not isinstance(rel, str) or Path(rel).is_absolute() or ".." in Path(rel).parts:
        return None
    path = out / rel
    try:
        sha = shas[path] if shas is not None and path in shas else sha256_file(path)
    except OSError:
        return None
    if shas is not None:
        shas[path] = sha
    return dict(stamp, artifact=rel) if sha == stamp.get("sha256") else None


def remove_unreferenced(out: Path, targets, keep: set[str]) -> list[str]:
    """Delete the artifacts in ``out/<target>/`` that neither ``keep`` nor any build stamp there names.

    Run under the folder lock after the manifest merge: an artifact every
    variant of which was rebuilt elsewhere is dead weight (and ``doctor``
    would report it).  Stamps move in with their artifact under the same
    lock, so a concurrent build's fresh artifact is always named by a stamp.
    """
    from .lower import artifact_suffix

    removed = []
    for target in targets:
        folder = out / target
        if not folder.is_dir():
            continue
        named = set(keep)
        for f in folder.glob("*.json"):
            try:
                stamp = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(stamp, dict):
                named.add(stamp.get("artifact") or f"{target}/{f.name[:-5]}{artifact_suffix(target)}")
        for f in folder.glob(f"*{artifact_suffix(target)}"):
            if f"{target}/{f.name}" not in named:
                f.unlink(missing_ok=True)
                removed.append(f"{target}/{f.name}")
    return removed
