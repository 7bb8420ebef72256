"""Mutation testing: apply realistic bugs one at a time to a copy of the package and run their tests.

    python benchmarks/mutation.py --out benchmarks/results/mutation.json

Each mutation of ``benchmarks/mutations.json`` is a regex edit of one source
file that must match exactly ``count`` times (default 1); when it does not,
the mutation is reported as ``patch no longer applies`` rather than
silently passing.  The package is copied to a temporary folder (the working
tree is never touched), the unmutated copy must pass every listed test
first, and then each mutant runs its tests (``-x``, a fixed hypothesis seed):

* ``killed``: a test failed, as it should;
* ``survived``: every test passed with the bug in place;
* ``error``: pytest could not run (collection error, no tests).

Prints one line per mutation and writes the results as JSON; exits 1 when
any mutation survives, does not apply, or errs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the package root (the repository root is the package)
DEFAULT_LIST = Path(__file__).with_name("mutations.json")
SELF_TEST = "tests/passes/test_mutation_list.py"
IGNORE = shutil.ignore_patterns(".git", "__pycache__", ".hypothesis", "build", "results", "*.egg-info", ".venv")


class PatchError(ValueError):
    """A mutation whose pattern does not match its file the expected number of times."""


def load(path: Path = DEFAULT_LIST) -> list[dict]:
    data = json.loads(Path(path).read_text())
    muts = data["mutations"]
    ids = [m["id"] for m in muts]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: duplicate mutation ids")
    for m in muts:
        missing = {"id", "file", "description", "find", "replace", "tests"} - set(m)
        if missing:
            raise ValueError(f"{path}: mutation {m.get('id')} lacks {sorted(missing)}")
    return muts


def mutate(source: str, mutation: dict) -> str:
    """``source`` with ``mutation`` applied; ``PatchError`` unless it matches exactly ``count`` times."""
    want = mutation.get("count", 1)
    new, n = re.subn(mutation["find"], mutation["replace"], source)
    if n != want:
        raise PatchError(f"{mutation['id']}: pattern matched {n} time(s) in {mutation['file']}, expected {want}")
    if new == source:
        raise PatchError(f"{mutation['id']}: the replacement leaves {mutation['file']} unchanged")
    return new


def _pytest(copy: Path, tests: list[str], timeout: int) -> tuple[int, str, float]:
    env = dict(os.environ, PYTHONPATH=str(copy.parent), SPECGEN_VERIFY="1")
    # the list's own test would "kill" every mutant (its patch no longer applies to a mutated copy)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-x",
        "-q",
        "-p",
        "no:cacheprovider",
        "--hypothesis-seed=0",
        f"--ignore={SELF_TEST}",
        *tests,
    ]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -1, "timed out", time.perf_counter() - t0
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    failed = next((ln.split()[1] for ln in lines if ln.startswith(("FAILED ", "ERROR "))), None)
    summary = lines[-1] if lines else ""
    return proc.returncode, f"{failed}  ({summary})" if failed else summary, time.perf_counter() - t0


def run(mutations: list[dict], timeout: int = 900) -> dict:
    with tempfile.TemporaryDirectory(prefix="specgen-mutation-") as tmp:
        copy = Path(tmp) / "specgen"
        shutil.copytree(ROOT, copy, ignore=IGNORE)
        all_tests = sorted({t for m in mutations for t in m["tests"]})
        rc, last, secs = _pytest(copy, all_tests, timeout)
        baseline = {"tests": all_tests, "returncode": rc, "summary": last, "seconds": round(secs, 1)}
        if rc != 0:
            return {"baseline": baseline, "results": [], "error": "the unmutated copy fails its tests"}
        results = []
        for m in mutations:
            path = copy / m["file"]
            original = path.read_text() if path.exists() else None
            entry = {"id": m["id"], "file": m["file"], "description": m["description"], "tests": m["tests"]}
            try:
                if original is None:
                    raise PatchError(f"{m['id']}: {m['file']} does not exist")
                path.write_text(mutate(original, m))
            except PatchError as e:
                results.append({**entry, "status": "patch no longer applies", "detail": str(e)})
                continue
            try:
                rc, last, secs = _pytest(copy, m["tests"], timeout)
            finally:
                path.write_text(original)
            status = {0: "survived", 1: "killed"}.get(rc, "error")
            results.append({**entry, "status": status, "returncode": rc, "detail": last, "seconds": round(secs, 1)})
        return {"baseline": baseline, "results": results}


def table(report: dict) -> str:
    rows = [f"{r['status']:<24} {r['id']:<36} {r.get('seconds', 0):>6}s  {r['detail']}" for r in report["results"]]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", type=Path, default=DEFAULT_LIST, help="the mutations (JSON)")
    ap.add_argument("--only", action="append", default=[], help="run only these mutation ids (repeatable)")
    ap.add_argument("--out", type=Path, help="write the results here as JSON")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per pytest run")
    args = ap.parse_args(argv)
    muts = load(args.list)
    if args.only:
        unknown = set(args.only) - {m["id"] for m in muts}
        if unknown:
            ap.error(f"unknown mutation ids: {sorted(unknown)}")
        muts = [m for m in muts if m["id"] in args.only]
    report = run(muts, args.timeout)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    if "error" in report:
        print(f"baseline: {report['error']}: {report['baseline']['summary']}", file=sys.stderr)
        return 1
    print(table(report))
    killed = sum(r["status"] == "killed" for r in report["results"])
    print(f"{killed}/{len(report['results'])} killed")
    return 0 if killed == len(report["results"]) else 1


if __name__ == "__main__":
    sys.exit(main())
