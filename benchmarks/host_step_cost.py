"""Host time of a verify step's fast-path decision (``SpecVerifyRuntime._reason``), on the CPU.

    python benchmarks/host_step_cost.py --kernels build/specgen_kernels --out host_step_cost.json

Before every step the runtime decides on the host whether the captured graph may run:
the capability, the plan, the layout, the bucket and every guard of every kernel of the
plan for the step's sequence-length bounds (``runtime/fallback.py``).  In a pipelined decode
loop this is host work per step that the device does not wait for only while it stays
short of the device's step.  Timed here for the plan as built and for the plan a draft
prologue hoists (five kernels instead of three), at bounds that pass and at bounds that
fail a guard: medians of ``--repeats`` runs of ``--calls`` calls each.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path


def measure(kernels: Path, width: int, calls: int, repeats: int) -> list[dict]:
    from specgen.runtime.capabilities import SpeculativeVerifyCapabilities
    from specgen.runtime.library import load_library
    from specgen.runtime.verify_graph import Prologue, SpecVerifyRuntime

    lib = load_library(kernels)
    layouts = sorted(
        {
            (v.block_table_width, v.block_size)
            for v in lib.manifest.variants
            if v.family == "spec_verify_head_update" and v.width == width
        }
    )
    if not layouts:
        raise SystemExit(f"{kernels}: no spec_verify_head_update variant at width {width}")
    bt, bs = layouts[0]
    caps = SpeculativeVerifyCapabilities(supports_in_graph_input_update=True, block_size=bs, block_table_width=bt)
    plans = {
        "as built": None,
        "hoisted beside a draft": Prologue(lambda: None, writes=("draft_tokens",), setup=lambda: None),
    }
    out = []
    for plan, prologue in plans.items():
        rt = SpecVerifyRuntime(lib, lambda b: b["tokens"].view(-1, width), caps, width, max_batch=1, prologue=prologue)
        table = rt.buffers(1)["block_table"][:1]
        for case, bounds in (("guards hold", (bt * bs // 2, bt * bs // 2 + width)), ("a guard fails", (0, 10**9))):
            runs = []
            for _ in range(repeats):
                t = time.perf_counter()
                for _ in range(calls):
                    reason = rt._reason(1, table, bounds)
                runs.append((time.perf_counter() - t) / calls * 1e6)
            out.append(
                {
                    "plan": plan,
                    "kernels": len(rt.step_plan.kernels),
                    "case": case,
                    "reason": reason,
                    "us_per_step": round(statistics.median(runs), 2),
                    "runs_us": [round(x, 2) for x in runs],
                }
            )
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernels", type=Path, required=True, help="a build folder (specgen build --out)")
    p.add_argument("--width", type=int, default=4)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    rows = measure(args.kernels, args.width, args.calls, args.repeats)
    for r in rows:
        print(f"{r['plan']:>24}  {r['kernels']} kernels  {r['case']:>13}: {r['us_per_step']:8.1f} us per step")
    if args.out:
        doc = {
            "command": " ".join(["python", "benchmarks/host_step_cost.py", *(argv or sys.argv[1:])]),
            "python": sys.version.split()[0],
            "rows": rows,
        }
        args.out.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
