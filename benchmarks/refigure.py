"""A saved trace's kernel-level figures again, from the file alone (``bench/kernel_timeline.py``'s medians).

Usage::

    python benchmarks/refigure.py TRACE.json.gz [--last-lane-of NAME] [--out figures.json]
    python benchmarks/refigure.py --bench BENCH_JSON --out REFIGURED_JSON


A trace saved before the forward's span was found from two lanes (``kernel_timeline.forward_lanes``) holds the
forward's main stream only.  Where the forward forked (a block draft's context rows beside the target's later
layers), a graph replay may run the rest of the forward on another stream, and the figures then end the forward
at the fork's end.  ``--last-lane-of NAME`` reads that other lane from the step graph itself: all the step's
kernels on the stream, other than the main lane's, that runs a kernel whose name holds NAME (the LM head's GEMM,
e.g. ``nvjet``).  That is the forward's last lane only where the stream runs nothing else in the step (no tail
kernel after the argmax): check the count printed as ``last_lane_kernels``.  Printed: the figures with the saved
forward and with the two lanes.

Each trace's figures are also given without the steps at which the device waited for the host's launch
(``"host_kept"``, ``bench/host_bound.py``).  ``--bench`` rewrites every run of a ``bench.json`` that names a
kernel trace (``kernel_trace``, beside the file) with the figures the bench computes today from that trace, and
writes the result to ``--out``: a sweep recorded before a change to the figures, figured again.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specgen.bench import host_bound
from specgen.bench import kernel_timeline as kt
from specgen.bench.profiler import figures, read_trace, trace_projection


def last_lane(steps: dict, forward: list[str], name: str) -> list[str] | None:
    """The kernel names of the first step's stream that runs ``name`` but not the saved forward."""
    for s in steps.values():
        by_stream: dict = {}
        for r in sorted(s.verify, key=lambda r: r.start):
            if r.cat == "kernel":
                by_stream.setdefault(r.stream, []).append(r.name)
        main = next((st for st, names in by_stream.items() if kt._find(names, forward) is not None), None)
        if main is None:
            continue
        for st, names in by_stream.items():
            if st != main and any(name in n for n in names):
                return names
    return None


def refigure_bench(path: Path) -> tuple[dict, int]:
    """``path``'s bench.json with every run that names a kernel trace figured again from it; and how many were."""
    bench = json.loads(path.read_text())
    done = 0
    for row in bench.get("runs", []):
        name = row.get("kernel_trace")
        if not name or not (path.parent / name).is_file():
            continue
        events, forward, draft = read_trace(path.parent / name)
        row.update(figures(events, forward, draft, trace_projection(path.parent / name)))
        done += 1
    return bench, done


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path, nargs="?")
    ap.add_argument("--last-lane-of", default=None, help="a kernel name part of the forward's last lane (LM head)")
    ap.add_argument("--bench", type=Path, default=None, help="a bench.json whose runs' kernel traces lie beside it")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    if (args.trace is None) == (args.bench is None):
        ap.error("give a trace or --bench, not both")
    if args.bench is not None:
        if args.out is None:
            ap.error("--bench writes its result to --out")
        bench, done = refigure_bench(args.bench)
        args.out.write_text(json.dumps(bench, indent=1) + "\n")
        print(f"{done} run(s) figured again from their traces; wrote {args.out}")
        return 0 if done else 1
    events, forward, draft = read_trace(args.trace)
    projection = trace_projection(args.trace)
    steps = kt.attribute(events, draft)
    figs = kt.step_figures(steps, forward, projection)
    out = {"trace": str(args.trace), "saved": kt.summarize(figs)}
    out["host_kept"] = host_bound.summarize(host_bound.mark(figs, steps, forward, host_bound.launch_calls(events)))
    if args.last_lane_of:
        lane = last_lane(steps, forward, args.last_lane_of)
        if lane is None:  # the saved lane runs the whole forward: its figures stand
            print(f"no stream besides the forward's runs a kernel named like {args.last_lane_of!r}", file=sys.stderr)
        else:
            out["lanes"] = kt.summarize(kt.step_figures(steps, [forward, lane], projection))
            out["last_lane_kernels"] = len(lane)
    print(json.dumps(out, indent=1))
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
