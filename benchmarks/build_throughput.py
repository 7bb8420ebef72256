"""How long ``specgen build`` takes: cold and warm, the default matrix and a wide one.

Each scenario runs in a fresh Python process (a cold build pays every import),
into a fresh folder; the warm scenario rebuilds the folder the cold one made.
Writes benchmarks/results/build_throughput.json::

    python benchmarks/build_throughput.py [--scenarios default,wide,cuda] [--jobs N] [--repeat N]

Per scenario and run: the command line it stands for, wall seconds, variants
built and cached, where the workers' time went (rendering and lowering,
compiler runs), how long the workers were up and how much of that was the
tail (a worker idle, nothing left to hand it), the CPU seconds of the build and
everything it started (what a shared machine does not change much: wall on N
free cores is about cpu_s / N when the workers stay busy), and the 1-minute
load average before the run; then the medians of the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WIDE = ["--widths", "2-16", "--block-table-widths", "32,64", "--block-sizes", "16,128"]
SCENARIOS = {  # name -> (build options, warm rebuild after the cold one)
    "default": ([], True),
    "wide": (WIDE, True),
    "cuda": (
        ["--target", "c,cuda", "--widths", "4", "--families", "spec_verify_token_update,greedy_prefix_verify"],
        False,
    ),
}


def _one(argv: list[str], out: str, jobs: int) -> dict:
    """Run one build in this process (``--one``): the summary and its phases."""
    t0 = time.perf_counter()
    from specgen.cli import build as cli_build
    from specgen.driver import plan_and_build

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    cli_build.register(sub)
    args = parser.parse_args(["build", *argv, "--out", out, "--quiet"])
    matrix = cli_build._matrix(args)
    targets = tuple(args.target.split(","))
    families = tuple(args.families.split(",")) if args.families else None
    s = plan_and_build(matrix, targets, out, arch=args.arch, jobs=jobs, families=families, progress=None)
    return {
        "seconds_in_process": round(time.perf_counter() - t0, 2),
        "built": s.built,
        "cached": s.cached,
        "failed": len(s.failed),
        "lower_s_summed": round(s.lower_s, 1),
        "compile_s_summed": round(s.compile_s, 1),
        "compiler_runs": s.compiler_runs,
        "pool_s": round(s.pool_s, 1),
        "tail_s": round(s.tail_s, 1),
    }


def _timed(argv: list[str], out: str, jobs: int) -> dict:
    """One build in a fresh process: wall seconds and the CPU seconds of it and its workers and compilers."""
    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, "--one", json.dumps(argv), "--out", out, "--jobs", str(jobs)],
        capture_output=True,
        text=True,
        check=False,
    )
    wall, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"build {argv} failed:\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 1), **json.loads(proc.stdout.strip().splitlines()[-1])}


def _median(rows: list[dict]) -> float:
    walls = sorted(r["wall_s"] for r in rows)
    return (
        walls[len(walls) // 2]
        if len(walls) % 2
        else round((walls[len(walls) // 2 - 1] + walls[len(walls) // 2]) / 2, 2)
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenarios", default="default,wide,cuda")
    p.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--repeat", type=int, default=1, help="cold (and warm) builds per scenario, each in a new folder")
    p.add_argument("--one", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--json", default=str(Path(__file__).parent / "results" / "build_throughput.json"))
    args = p.parse_args()
    if args.one is not None:
        print(json.dumps(_one(json.loads(args.one), args.out, args.jobs)))
        return
    results = {"cores": len(os.sched_getaffinity(0)), "jobs": args.jobs, "repeat": args.repeat, "scenarios": {}}
    for name in args.scenarios.split(","):
        argv, warm = SCENARIOS[name]
        row = {"command": " ".join(["specgen build", *argv, f"--jobs {args.jobs}"]), "cold": [], "warm": []}
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as tmp:
                out = str(Path(tmp) / "kernels")
                load = os.getloadavg()[0]
                row["cold"].append(dict(_timed(argv, out, args.jobs), load_1min_before=round(load, 2)))
                if warm:
                    row["warm"].append(_timed(argv, out, args.jobs))
            print(name, json.dumps({k: v[-1] for k, v in row.items() if isinstance(v, list) and v}), flush=True)
        row["cold_median_s"] = _median(row["cold"])
        row["cold_median_cpu_s"] = _median([{"wall_s": r["cpu_s"]} for r in row["cold"]])
        if row["warm"]:
            row["warm_median_s"] = _median(row["warm"])
        else:
            del row["warm"]
        results["scenarios"][name] = row
    Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
