"""The build folder that several builds share: its lock, their staging folders, the manifest merge.

A build adds to its folder.  It compiles each variant in a staging folder of
its own (``.staging/<host>-<pid>-<token>/``), moves finished files into place
and merges its entries into ``manifest.json`` while holding ``.lock``, so two
builds into one folder at once both end with a manifest that lists every
variant on disk.  The merge keeps every entry of the old manifest whose
artifact is still there and that this build did not remake; ``replace`` drops
the others (and deletes their files, and the target folders left empty) instead.  A staging folder whose build
process is gone (killed, interrupted) is removed by the next build.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
from contextlib import contextmanager
from pathlib import Path

from ..specializations.targets import TARGETS

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: builds into one folder must not overlap there
    fcntl = None

LOCK_NAME = ".lock"
STAGING = ".staging"
MANIFEST = "manifest.json"


@contextmanager
def folder_lock(out: Path):
    """Hold ``out/.lock`` (an exclusive ``flock``) for the block; blocks while another build holds it."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / LOCK_NAME, "a+") as f:
        if fcntl is not None:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _host() -> str:
    return "".join(c if c.isalnum() else "_" for c in socket.gethostname())[:40] or "host"


def new_staging(out: Path) -> Path:
    """A fresh staging folder for one build: ``.staging/<host>-<pid>-<token>``."""
    path = out / STAGING / f"{_host()}-{os.getpid()}-{secrets.token_hex(4)}"
    path.mkdir(parents=True)
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def stale_staging(out: Path) -> list[Path]:
    """Staging folders of this host whose build process no longer runs (or that no build names)."""
    root = out / STAGING
    if not root.is_dir():
        return []
    stale = []
    for d in sorted(root.iterdir()):
        parts = d.name.rsplit("-", 2)
        if len(parts) != 3 or not parts[1].isdigit():
            stale.append(d)  # not a build's folder (an older layout, a stray file)
        elif parts[0] == _host() and not _alive(int(parts[1])):
            stale.append(d)
    return stale


def sweep_staging(out: Path) -> list[Path]:
    """Remove the staging folders that interrupted builds left behind; returns them."""
    stale = stale_staging(out)
    for d in stale:
        if d.is_dir():
            shutil.rmtree(d, ignore_errors=True)
        else:
            d.unlink(missing_ok=True)
    drop_empty_staging(out)
    return stale


def drop_empty_staging(out: Path) -> None:
    try:
        (out / STAGING).rmdir()
    except OSError:  # not empty (another build is running) or already gone
        pass


def drop_empty_target_folders(out: Path) -> None:
    """Remove the target folders (``c/``, ``cuda/`` ...) that hold nothing, e.g. once ``replace`` emptied them."""
    for name in TARGETS:
        try:
            (out / name).rmdir()
        except OSError:  # not empty, or not there
            pass


def read_manifest(out: Path) -> tuple[dict | None, str | None]:
    """The folder's manifest as written and None, or None and why it cannot be used (None: there is none)."""
    from ..runtime.manifest import ManifestError, parse_manifest

    path = out / MANIFEST
    if not path.exists():
        return None, None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        parse_manifest(data, path)
    except (OSError, ValueError) as e:  # ManifestError is a ValueError
        why = str(e) if isinstance(e, ManifestError) else f"{path}: cannot read it: {e}"
        return None, f"{why}; its variants are not kept"
    return data, None


def variant_files(entry: dict) -> list[str]:
    """The folder-relative files of one manifest entry: artifact, program, source and build stamp."""
    files = [entry.get("artifact"), entry.get("program"), entry.get("source")]
    target, key = entry.get("target"), entry.get("key")
    if target in TARGETS and isinstance(key, str):
        files.append(f"{target}/{key}.json")
    return [f for f in files if isinstance(f, str) and f]


def merge(old: dict | None, new: dict, out: Path, schema_version: int, replace: bool = False) -> tuple[dict, list[str]]:
    """``new`` (this build's manifest) merged into ``old``; returns it and notes for the user.

    Kept from ``old``: the variants this build did not remake whose artifact is
    still in ``out``, their plans and targets.  With ``replace`` nothing is
    kept and the files of the variants dropped are deleted.
    """
    notes: list[str] = []
    if old is not None and old.get("schema_version") != schema_version:
        notes.append(f"{out / MANIFEST} had schema {old.get('schema_version')!r}; its variants are not kept")
        old = None
    old_variants = [v for v in (old or {}).get("variants") or [] if isinstance(v, dict)]
    made = {(v["key"], v["target"]): v for v in new["variants"]}
    in_use = {v.get("artifact") for v in new["variants"]}  # variants share artifacts: never delete one in use
    kept, missing = [], []
    for v in old_variants:
        slot = (v.get("key"), v.get("target"))
        if slot in made:
            if not replace:  # the boundaries that needed it before still need it
                made[slot]["boundaries"] = sorted(set(made[slot]["boundaries"]) | set(v.get("boundaries") or ()))
        elif replace:
            for rel in variant_files(v):
                if ".." not in Path(rel).parts and not Path(rel).is_absolute() and rel not in in_use:
                    (out / rel).unlink(missing_ok=True)
        elif isinstance(v.get("artifact"), str) and (out / v["artifact"]).is_file():
            kept.append(v)
        else:
            missing.append(f"{v.get('key')} ({v.get('target')})")
    if replace:
        drop_empty_target_folders(out)
    if missing:
        notes.append(
            f"dropped {len(missing)} variant(s) whose artifact is gone: {', '.join(missing[:4])}"
            + (" ..." if len(missing) > 4 else "")
        )
    variants = sorted([*kept, *made.values()], key=lambda v: (v["key"], v["target"]))
    plans: dict = (
        {} if replace else {b: dict(p) for b, p in ((old or {}).get("plans") or {}).items() if isinstance(p, dict)}
    )
    for boundary, by_layout in new["plans"].items():
        plans.setdefault(boundary, {}).update(by_layout)
    matrix = dict(new["matrix"])
    old_matrix = (old or {}).get("matrix")
    if not replace and isinstance(old_matrix, dict):
        for k in ("widths", "block_table_widths", "block_sizes", "draft_dtypes"):
            if isinstance(old_matrix.get(k), list):
                matrix[k] = sorted(set(matrix[k]) | set(old_matrix[k]))
    merged = dict(
        new,
        variants=variants,
        plans=plans,
        matrix=matrix,
        targets=sorted({v["target"] for v in variants} | set(new["targets"])),
    )
    return merged, notes
