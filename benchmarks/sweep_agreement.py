"""Whether two sweeps agree on the kernel-level figures of the runs they share: a sweep of several modes and
one of a single mode, made at the same commit on the same machine, should give that mode the same figures
whatever else ran earlier in the process (issue: within 1 us per cell).

Usage::

    python benchmarks/sweep_agreement.py FOUR_MODE/bench.json ONE_MODE/bench.json [--tolerance-us 1.0] [--out F]

Prints a Markdown table, per (mode, depth, batch) both sweeps hold and per kernel-level figure, of both
medians and their difference, and whether every difference is within the tolerance; ``--out`` writes the
same as JSON.  The status is 0 when every shared cell agrees, 1 when one does not, 2 when the sweeps share
no cell.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

FIGURES = ("kernel_draft_to_verify_us", "head_us", "kernel_verify_to_draft_us", "kernel_post_verify_us")


def runs(path: Path) -> dict[tuple[str, int, int], dict]:
    """``bench.json``'s finished runs by (mode, depth, batch)."""
    data = json.loads(Path(path).read_text())
    return {(r["mode"], r["depth"], r["batch"]): r for r in data["runs"] if "error" not in r}


def compare(a: dict, b: dict, tolerance_us: float) -> list[dict]:
    """One row per shared cell and figure that both sweeps measured."""
    rows = []
    for key in sorted(set(a) & set(b)):
        for f in FIGURES:
            x, y = a[key].get(f), b[key].get(f)
            if x is None or y is None:
                continue
            diff = round(y - x, 3)
            mode, depth, batch = key
            rows.append(
                {
                    "mode": mode,
                    "depth": depth,
                    "batch": batch,
                    "figure": f,
                    "a": x,
                    "b": y,
                    "diff_us": diff,
                    "agrees": abs(diff) <= tolerance_us,
                }
            )
    return rows


def table(rows: list[dict], tolerance_us: float) -> str:
    lines = [
        "| mode | depth | B | figure | sweep A (us) | sweep B (us) | B - A (us) | within |",
        "|---|--:|--:|---|--:|--:|--:|---|",
    ]
    for r in rows:
        ok = "yes" if r["agrees"] else "**no**"
        lines.append(
            f"| {r['mode']} | {r['depth']} | {r['batch']} | {r['figure']} | {r['a']} | {r['b']} | "
            f"{r['diff_us']:+.3f} | {ok} |"
        )
    bad = sum(not r["agrees"] for r in rows)
    lines.append("")
    lines.append(f"{len(rows) - bad}/{len(rows)} cells within {tolerance_us} us")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="kernel-level figures of two sweeps, cell by cell")
    p.add_argument("a", type=Path, help="the first sweep's bench.json (e.g. all four modes)")
    p.add_argument("b", type=Path, help="the second sweep's bench.json (e.g. one mode alone)")
    p.add_argument("--tolerance-us", type=float, default=1.0)
    p.add_argument("--out", type=Path, help="where to write the rows as JSON")
    args = p.parse_args(argv)
    rows = compare(runs(args.a), runs(args.b), args.tolerance_us)
    if not rows:
        print(f"{args.a} and {args.b} share no run with kernel-level figures", file=sys.stderr)
        return 2
    print(table(rows, args.tolerance_us))
    if args.out is not None:
        doc = {"a": str(args.a), "b": str(args.b), "tolerance_us": args.tolerance_us, "rows": rows}
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0 if all(r["agrees"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
