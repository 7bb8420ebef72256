"""Whether a change kept what specgen writes: plan JSON, built manifests and the fields of bench.json.

Run ``collect`` at each of two commits (each in its own checkout and environment), then ``compare``::

    python benchmarks/equivalence.py collect OUT_DIR     # plans, a default build, tiny MTP and DFlash benches
    python benchmarks/equivalence.py compare BASE_DIR NEW_DIR --out benchmarks/results/architecture/equivalence.json

Plans must be byte-equal.  Manifests must be equal once the fields that hash compiled artifacts are
set aside (``sha256``: a shared library's bytes differ between two builds of the same sources, which
the compare shows by listing what differs) and every generated program and source file must be
byte-equal.  bench.json must have the same fields at the top and in every run (the values are
measurements).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

PLANS = [(b, w) for b in ("draft-to-verify", "verify-to-draft", "context-kv") for w in (2, 4, 6)]
BENCHES = {
    "mtp": ["--model", "tiny", "--steps", "4", "--check"],
    "dflash": ["--model", "tiny", "--steps", "4", "--draft", "dflash", "--depth", "3", "--check"],
}
ARTIFACT_FIELDS = {"sha256"}


def _specgen(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specgen", *args], capture_output=True, text=True, **kw)


def collect(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for b, w in PLANS:
        done = _specgen("plan", "--boundary", b, "--width", str(w), "--batch", "8", "--format", "json", check=True)
        (out / f"plan_{b}_{w}.json").write_text(done.stdout)
    done = _specgen(
        "plan", "--boundary", "draft-to-verify", "--width", "4", "--batch", "8", "--linear-state", "--format", "json"
    )
    (out / "plan_linear_state.json").write_text(done.stdout)
    _specgen("build", "--out", str(out / "build"), check=True)
    for name, args in BENCHES.items():
        _specgen("bench", *args, "--out", str(out / f"bench_{name}"), check=True)
    print(f"collected into {out}")


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in ARTIFACT_FIELDS}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _fields(bench: dict) -> dict:
    return {"top": sorted(bench), "runs": sorted({k for r in bench["runs"] for k in r})}


def compare(base: Path, new: Path) -> dict:
    report: dict = {"plans": {}, "manifest": {}, "sources": {}, "bench_fields": {}}
    for path in sorted(base.glob("plan_*.json")):
        report["plans"][path.name] = path.read_bytes() == (new / path.name).read_bytes()
    bm = json.loads((base / "build" / "manifest.json").read_text())
    nm = json.loads((new / "build" / "manifest.json").read_text())
    report["manifest"]["equal_without_artifact_hashes"] = _strip(bm) == _strip(nm)
    report["manifest"]["byte_equal"] = (base / "build" / "manifest.json").read_bytes() == (
        new / "build" / "manifest.json"
    ).read_bytes()
    generated = [p for p in (base / "build").rglob("*") if p.suffix in (".c", ".cu", ".py") and p.is_file()]
    differ = [str(p.relative_to(base)) for p in generated if p.read_bytes() != (new / p.relative_to(base)).read_bytes()]
    report["sources"] = {"files": len(generated), "differ": differ}
    for name in BENCHES:
        b = json.loads((base / f"bench_{name}" / "bench.json").read_text())
        n = json.loads((new / f"bench_{name}" / "bench.json").read_text())
        report["bench_fields"][name] = {"equal": _fields(b) == _fields(n), "base": _fields(b), "new": _fields(n)}
    report["all_equal"] = (
        all(report["plans"].values())
        and report["manifest"]["equal_without_artifact_hashes"]
        and not differ
        and all(v["equal"] for v in report["bench_fields"].values())
    )
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("out", type=Path)
    k = sub.add_parser("compare")
    k.add_argument("base", type=Path)
    k.add_argument("new", type=Path)
    k.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    if args.cmd == "collect":
        collect(args.out)
        return 0
    report = compare(args.base, args.new)
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "bench_fields"}, indent=1))
    return 0 if report["all_equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
