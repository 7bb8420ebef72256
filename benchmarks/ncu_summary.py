"""A few lines from Nsight Compute's CSV pages of one profiled launch (``ncu --import R --page details --csv`` and
``--page source --print-source cuda,sass --csv``), for reading a profile where the GUI is not at hand.

Usage: python benchmarks/ncu_summary.py DETAILS_CSV [SOURCE_CSV] [--top N]

From the details page: the launch's duration, throughputs, instructions, registers, occupancy and the warp
stall reasons (every metric whose name mentions them). From the source page: the N source lines (default 15)
with the most warp-state samples, with their text. Column names differ between ncu versions, so columns are
found by what their names contain; a page that does not parse says so and the other is still read.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

KEEP = (
    "Duration",
    "Throughput",
    "Executed Instructions",
    "Registers Per Thread",
    "Achieved Occupancy",
    "Block Limit",
    "Stall",
    "Warp Cycles Per Issued Instruction",
    "Local Memory Spilling",
)


def _rows(path: Path) -> list[dict]:
    """The CSV's rows as dicts; ncu may print lines before the header (``==PROF==`` notes): skipped."""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    start = next((k for k, ln in enumerate(lines) if ln.startswith('"')), None)
    if start is None:
        return []
    return list(csv.DictReader(lines[start:]))


def details(path: Path) -> list[str]:
    rows = _rows(path)
    if not rows or "Metric Name" not in rows[0]:
        return [f"{path}: no details table (is it ncu --page details --csv?)"]
    out = []
    for r in rows:
        name = r.get("Metric Name") or ""
        if any(k in name for k in KEEP):
            unit = r.get("Metric Unit") or ""
            out.append(f"{(r.get('Section Name') or '')[:28]:28s} {name[:48]:48s} {r.get('Metric Value', '')} {unit}")
    return out or [f"{path}: none of the metrics {KEEP} in it"]


def source(path: Path, top: int) -> list[str]:
    rows = _rows(path)
    if not rows:
        return [f"{path}: no source table (is it ncu --page source --csv?)"]
    cols = list(rows[0])
    samples = next((c for c in cols if "Sampl" in c and "Not" not in c), None)
    text = next((c for c in cols if c.strip().lower() in ("source", "source code")), None) or next(
        (c for c in cols if "Source" in c), None
    )
    line = next((c for c in cols if c.strip() in ("#", "Line", "Line Number")), None)
    if samples is None or text is None:
        return [f"{path}: no sample or source column among {cols[:12]}"]

    def count(r: dict) -> float:
        try:
            return float((r.get(samples) or "0").replace(",", ""))
        except ValueError:
            return 0.0

    total = sum(count(r) for r in rows) or 1.0
    best = sorted(rows, key=count, reverse=True)[:top]
    return [
        f"{count(r) / total * 100:5.1f}%  {(r.get(line) or '') if line else '':>6}  {(r.get(text) or '').strip()[:110]}"
        for r in best
        if count(r) > 0
    ]


def main(argv: list[str]) -> int:
    top = 15
    if "--top" in argv:
        k = argv.index("--top")
        top, argv = int(argv[k + 1]), argv[:k] + argv[k + 2 :]
    if not 1 <= len(argv) <= 2:
        print(__doc__, file=sys.stderr)
        return 2
    print("\n".join(details(Path(argv[0]))))
    if len(argv) == 2:
        print(f"\nthe {top} source lines with the most warp-state samples (share of all samples):")
        print("\n".join(source(Path(argv[1]), top)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
