"""Copy a kernel folder for Nsight Compute's source view: its cuda variants only, the vocabulary pass's
cubins recompiled from their sources with ``-lineinfo`` and their sha256 in the manifest renewed.

Usage: python benchmarks/lineinfo_copy.py SRC DST   (DST is replaced)

The copy loads through the runtime like any build folder; ncu's ``--import-source yes`` then attributes
instructions and stall samples to the generated ``.cu`` lines (``benchmarks/vocab_ab.py`` is the launch).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

from specgen.codegen.lower import include_dirs
from specgen.specializations.vocab_sample import VOCAB_FAMILIES


def recompiled_copy(src: Path, dst: Path, flags: list[str], transform=None) -> list[dict]:
    """``dst``: ``src``'s cuda variants, the vocabulary pass's cubins recompiled from their sources with the extra
    nvcc ``flags`` (``transform(family, source)`` rewrites each source first), their sha256 renewed in the
    manifest; the rewritten variants' manifest entries."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("c"))
    manifest = json.loads((dst / "manifest.json").read_text())
    manifest["variants"] = [v for v in manifest["variants"] if v["target"] == "cuda"]
    done = []
    for v in manifest["variants"]:
        if v["family"] in VOCAB_FAMILIES:  # every vocabulary family's cubin is recompiled
            cu, art = dst / v["source"], dst / v["artifact"]
            if transform is not None:
                cu.write_text(transform(v["family"], cu.read_text()))
            inc = [f"-I{d}" for d in include_dirs()]
            cmd = ["nvcc", "-cubin", f"-arch={v['arch']}", "-std=c++17", "-w", *flags, *inc]
            subprocess.run([*cmd, "-o", str(art), str(cu)], check=True)
            v["sha256"] = hashlib.sha256(art.read_bytes()).hexdigest()
            done.append(v)
    (dst / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return done


def main(src: Path, dst: Path) -> None:
    recompiled_copy(src, dst, ["-lineinfo"])
    print(f"{dst}: {len(json.loads((dst / 'manifest.json').read_text())['variants'])} cuda variants")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]))
