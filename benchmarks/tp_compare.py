"""TP1 against TP2 from two ``specgen bench`` results: one markdown table.

python benchmarks/tp_compare.py OUT/bench_tp1/bench.json OUT/bench_tp2/bench.json
"""

from __future__ import annotations

import json
import sys

MODES = ("baseline", "compile", "specgen")


def rows(path: str) -> tuple[dict, int]:
    result = json.loads(open(path).read())
    return {(r["depth"], r["batch"], r["mode"]): r for r in result["runs"] if "error" not in r}, result.get("tp", 1)


def fmt(x, nd=3) -> str:
    return "-" if x is None else f"{x:.{nd}f}" if isinstance(x, float) else str(x)


def gain(runs: dict, depth: int, batch: int, other: str) -> str:
    s, o = runs.get((depth, batch, "specgen")), runs.get((depth, batch, other))
    if not s or not o or not s.get("tpot_ms") or not o.get("tpot_ms"):
        return "-"
    return f"{(s['tpot_ms'] / o['tpot_ms'] - 1) * 100:+.1f}%"


def main(a: str, b: str) -> None:
    (ra, ta), (rb, tb) = rows(a), rows(b)
    keys = sorted({(d, bt) for d, bt, _ in ra} | {(d, bt) for d, bt, _ in rb})
    print(
        f"| depth | B | TPOT ms TP{ta} -> TP{tb}: " + " / ".join(MODES) + " | specgen vs baseline TP"
        f"{ta} / TP{tb} | specgen vs compile TP{ta} / TP{tb} | host syncs per step TP{tb}: b / c / s "
        f"| verify->draft gap us TP{tb}: b / c / s | tokens equal reference TP{tb} |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for depth, batch in keys:
        tpot = " / ".join(
            f"{fmt(ra.get((depth, batch, m), {}).get('tpot_ms'))} -> "
            f"{fmt(rb.get((depth, batch, m), {}).get('tpot_ms'))}"
            for m in MODES
        )
        syncs = " / ".join(fmt(rb.get((depth, batch, m), {}).get("host_syncs_per_step"), 0) for m in MODES)
        gaps = " / ".join(fmt(rb.get((depth, batch, m), {}).get("verify_to_draft_us"), 1) for m in MODES)
        equal = all(
            r.get("equals_target_reference", False) for (d, bt, _), r in rb.items() if (d, bt) == (depth, batch)
        )
        print(
            f"| {depth} | {batch} | {tpot} | {gain(ra, depth, batch, 'baseline')} / "
            f"{gain(rb, depth, batch, 'baseline')} | {gain(ra, depth, batch, 'compile')} / "
            f"{gain(rb, depth, batch, 'compile')} | {syncs} | {gaps} | {equal} |"
        )


if __name__ == "__main__":
    main(*sys.argv[1:3])
