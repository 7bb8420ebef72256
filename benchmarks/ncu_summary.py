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
    """The ``top`` source lines by warp-state samples. The page is one table, or (ncu 2025+) one table per source
    file, each after a ``"File Path"`` row, whose SASS rows under a source line have no line number."""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    found, where, cols = [], "", None
    for row in csv.reader(ln for ln in lines if ln.startswith('"')):
        if row and row[0] == "File Path":
            where = Path(row[1]).name if len(row) > 1 else ""
        elif any("Sampl" in c for c in row):  # a table's header: the first sample, source and line columns
            sample = next(k for k, c in enumerate(row) if "Sampl" in c and "Not" not in c)
            text = next((k for k, c in enumerate(row) if c.strip() in ("Source", "Source Code")), None)
            line = next((k for k, c in enumerate(row) if c.strip() in ("#", "Line", "Line No", "Line Number")), None)
            cols = (sample, text, line) if text is not None else None
        elif cols is not None and len(row) > max(k for k in cols if k is not None):
            sample, text, line = cols
            number = row[line] if line is not None else ""
            if line is not None and not number:
                continue  # a SASS row under its source line
            try:
                count = float(row[sample].replace(",", "") or 0)
            except ValueError:
                continue
            found.append((count, f"{where}:" if where else "", number, row[text].strip()))
    if not found:
        return [f"{path}: no source table with samples (is it ncu --page source --csv?)"]
    total = sum(c for c, *_ in found) or 1.0
    best = sorted(found, key=lambda f: f[0], reverse=True)[:top]
    return [f"{c / total * 100:5.1f}%  {w}{n:>6}  {t[:110]}" for c, w, n, t in best if c > 0]


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
