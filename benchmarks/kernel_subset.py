"""A build folder cut down to the variants a device call loads: the device takes the working tree and at most 64 MiB
with the carried paths, and the tracked tree leaves room for a few whole kernel folders only.

Usage:
    python benchmarks/kernel_subset.py SRC DST [--families A,B,...] [--targets cuda,c]

DST: SRC's manifest with only the variants of those families (default: every one) and targets (default: both),
their sources and artifacts, and SRC's other top-level files (the package's ``__init__.py``, trace notes); the
runtime loads it as it loads SRC (``load_library``). A family or target that no variant of SRC has is an error, so a
misspelt name does not quietly give an empty folder.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path


def subset(src: Path, dst: Path, families: set[str] | None = None, targets: set[str] | None = None) -> list[dict]:
    """Write DST from SRC (see the module's text); the variants kept."""
    manifest = json.loads((src / "manifest.json").read_text())
    variants = manifest["variants"]
    for name, wanted, key in (("family", families, "family"), ("target", targets, "target")):
        unknown = sorted((wanted or set()) - {v[key] for v in variants})
        if unknown:
            raise ValueError(f"{src}: no variant of {name} {', '.join(unknown)}")
    kept = [
        v
        for v in variants
        if (families is None or v["family"] in families) and (targets is None or v["target"] in targets)
    ]
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    for v in kept:
        for key in ("source", "artifact"):
            if v.get(key):
                (dst / v[key]).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src / v[key], dst / v[key])
    for f in src.iterdir():
        if f.is_file() and f.name != "manifest.json":
            shutil.copy2(f, dst / f.name)
    (dst / "manifest.json").write_text(json.dumps({**manifest, "variants": kept}, indent=1))
    return kept


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--families", help="comma-separated family names (default: every one)")
    ap.add_argument("--targets", help="comma-separated targets, cuda and/or c (default: both)")
    args = ap.parse_args(argv)
    families = set(args.families.split(",")) if args.families else None
    targets = set(args.targets.split(",")) if args.targets else None
    try:
        kept = subset(args.src, args.dst, families, targets)
    except (ValueError, FileNotFoundError) as err:
        print(f"kernel_subset: {err}", file=sys.stderr)
        return 2
    size = sum(f.stat().st_size for f in args.dst.rglob("*") if f.is_file())
    print(f"{args.dst}: {len(kept)} variants, {size / 2**20:.2f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
