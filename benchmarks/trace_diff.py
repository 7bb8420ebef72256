"""Where two profiled runs of one step graph differ, kernel by kernel: e.g. the device guard on and off
(``h200.sh guard-ab`` keeps a profiled run of each), or two commits.

Usage::

    python benchmarks/trace_diff.py A/traces/trace_specgen_d3_b1.json.gz B/traces/trace_specgen_d3_b1.json.gz \
        [--min-us 0.3] [--out diff.json]

Each trace's steps (``bench/kernel_timeline.py``'s attribution, the draft found inside a fused step) give,
per position on the forward's stream (the draft, the head, the forward, the tail, in order), the median
over the steps of the record's duration and of the gap before it.  The two sequences are aligned by name
(``difflib``), so a record only one run has shows as added or removed.  Printed: the step span and the
main stream's busy and idle time of each run, what the other streams ran (records and device time per
step), and every aligned position whose duration or gap moved by more than ``--min-us``.
"""

from __future__ import annotations

import argparse
import difflib
import json
import statistics
import sys
from pathlib import Path

from specgen.bench import kernel_timeline as kt
from specgen.bench.profiler import read_trace


def main_stream(records: list) -> int | None:
    """The stream that ran most of a step's records (the forward's, in a captured step)."""
    counts: dict = {}
    for r in records:
        counts[r.stream] = counts.get(r.stream, 0) + 1
    return max(counts, key=counts.get) if counts else None


def profile(path: Path) -> dict:
    """Per position on the main stream: the name and the median duration and gap; and the step's totals."""
    events, _, draft = read_trace(path)
    steps, _ = kt.attribute_with_method(events, draft)
    seqs, spans, side = [], [], []
    for s in steps.values():
        records = sorted(s.draft + s.verify, key=lambda r: r.start)
        if not records:
            continue
        lane = main_stream(records)
        main = [r for r in records if r.stream == lane]
        seqs.append(main)
        spans.append(max(r.end for r in records) - records[0].start)
        others = [r for r in records if r.stream != lane]
        side.append((len(others), sum(r.dur for r in others)))
    if not seqs:
        raise SystemExit(f"{path}: no profiled step")
    names = [kt.draft_signature(seq, ordered=True) for seq in seqs]
    common = max(set(map(tuple, names)), key=lambda n: sum(tuple(x) == n for x in names))
    same = [seq for seq, n in zip(seqs, names) if tuple(n) == common]  # steps whose main stream ran the same list
    positions = []
    for i, name in enumerate(common):
        durs = [seq[i].dur for seq in same]
        gaps = [seq[i].start - seq[i - 1].end for seq in same] if i else [0.0] * len(same)
        positions.append({"name": name, "dur": statistics.median(durs), "gap": statistics.median(gaps)})
    return {
        "steps": len(seqs),
        "steps_alike": len(same),
        "span_us": statistics.median(spans),
        "busy_us": sum(p["dur"] for p in positions),
        "idle_us": sum(max(p["gap"], 0.0) for p in positions),
        "other_streams": {
            "records": statistics.median(n for n, _ in side),
            "device_us": statistics.median(t for _, t in side),
        },
        "positions": positions,
    }


def compare(a: dict, b: dict, min_us: float) -> list[dict]:
    """The aligned positions that differ by more than ``min_us`` (duration or gap), and the unmatched ones."""
    pa, pb = a["positions"], b["positions"]
    matcher = difflib.SequenceMatcher(a=[p["name"] for p in pa], b=[p["name"] for p in pb], autojunk=False)
    rows = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for i, j in zip(range(i1, i2), range(j1, j2)):
                dd, dg = pb[j]["dur"] - pa[i]["dur"], pb[j]["gap"] - pa[i]["gap"]
                if abs(dd) > min_us or abs(dg) > min_us:
                    rows.append({"at": i, "name": pa[i]["name"], "dur_a": pa[i]["dur"], "dur_b": pb[j]["dur"],
                                 "gap_a": pa[i]["gap"], "gap_b": pb[j]["gap"]})  # fmt: skip
            continue
        rows += [{"at": i, "name": pa[i]["name"], "only": "a", "dur_a": pa[i]["dur"]} for i in range(i1, i2)]
        rows += [{"at": j, "name": pb[j]["name"], "only": "b", "dur_b": pb[j]["dur"]} for j in range(j1, j2)]
    return rows


def report(a: dict, b: dict, rows: list[dict]) -> str:
    def totals(tag: str, p: dict) -> str:
        o = p["other_streams"]
        return (
            f"{tag}: {p['steps']} steps ({p['steps_alike']} alike), span {p['span_us']:.1f} us, main stream busy "
            f"{p['busy_us']:.1f} us and idle {p['idle_us']:.1f} us, other streams {o['records']:g} records, "
            f"{o['device_us']:.1f} us"
        )

    out = [
        totals("A", a),
        totals("B", b),
        "",
        "| at | record | dur A | dur B | gap A | gap B |",
        "|--:|---|--:|--:|--:|--:|",
    ]
    fmt = lambda v: "" if v is None else f"{v:.2f}"  # noqa: E731
    for r in rows:
        name = r["name"][:60] + (f" (only {r['only'].upper()})" if "only" in r else "")
        out.append(
            f"| {r['at']} | {name} | {fmt(r.get('dur_a'))} | {fmt(r.get('dur_b'))} | {fmt(r.get('gap_a'))} | "
            f"{fmt(r.get('gap_b'))} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="two profiled runs of one step graph, kernel by kernel")
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    p.add_argument("--min-us", type=float, default=0.3, help="list positions that moved by more than this")
    p.add_argument("--out", type=Path, help="the profiles and the rows as JSON")
    args = p.parse_args(argv)
    a, b = profile(args.a), profile(args.b)
    rows = compare(a, b, args.min_us)
    print(report(a, b, rows))
    if args.out is not None:
        args.out.write_text(json.dumps({"a": a, "b": b, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
