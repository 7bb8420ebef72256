"""The device idle beside a captured graph's copy and memset nodes, from profiled traces.

    python benchmarks/node_gaps.py TRACE.json.gz [TRACE ...] [--json OUT] [--min-records 20] [--where]

A graph launch's records share one correlation id.  Per launch, every gap between a record and the latest end
of the launch's earlier records is idle; the idle just before a memset or memcpy node and just before the
kernel after one is ``beside_us``, the rest ``other_us``.  Per trace and graph (launches grouped by their record
count): the launches, the node count, and the medians of both sums.  A cuBLASLt GEMM that zeroes its workspace
first, for one, shows up here as a memset and the wait around it.  ``--where`` lists each graph's memset and memcpy
nodes with the kernels before and after them (``sites``): what a graph that should hold kernels alone still holds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter, OrderedDict
from pathlib import Path

from specgen.bench import trace_records as tr

__all__ = ["launch_idle", "summarize"]


def launch_idle(records, min_records: int = 20) -> list[dict]:
    """Per graph launch of at least ``min_records`` records, in launch order: ``records``, ``nodes`` (memset and
    memcpy counts), ``sites`` (each such node's index, kind and the names of the records before and after it),
    ``beside_us`` and ``other_us``."""
    out = []
    for recs in tr.launches(records):
        if len(recs) < min_records:
            continue
        beside = other = 0.0
        for prev, r, gap in zip(recs, recs[1:], tr.idle_before(recs)):
            if r.cat != "kernel" or prev.cat != "kernel":
                beside += gap
            else:
                other += gap
        nodes = Counter(r.cat for r in recs if r.cat != "kernel")
        sites = [
            [i, r.cat, recs[i - 1].name if i else None, recs[i + 1].name if i + 1 < len(recs) else None]
            for i, r in enumerate(recs)
            if r.cat != "kernel"
        ]
        row = {"records": len(recs), "nodes": dict(nodes), "sites": sites}
        out.append(row | {"beside_us": beside, "other_us": other})
    return out


def summarize(launches: list[dict]) -> list[dict]:
    """Per graph (its record count), in first-seen order: the launches, the nodes and their sites in its first
    launch, and the medians of ``beside_us`` and ``other_us``."""
    groups: OrderedDict = OrderedDict()
    for launch in launches:
        groups.setdefault(launch["records"], []).append(launch)
    return [
        {
            "records": n,
            "launches": len(g),
            "nodes": g[0]["nodes"],
            "sites": g[0]["sites"],
            "beside_us": round(statistics.median(x["beside_us"] for x in g), 2),
            "other_us": round(statistics.median(x["other_us"] for x in g), 2),
        }
        for n, g in groups.items()
    ]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="+", help="profiled Chrome traces (.json or .json.gz)")
    p.add_argument("--json", help="also write the rows here")
    p.add_argument("--min-records", type=int, default=20, help="smaller launches are not graphs of interest")
    p.add_argument("--where", action="store_true", help="list each memset and memcpy node between its neighbours")
    a = p.parse_args(argv)
    rows = []
    print("| trace | graph records | launches | memset / memcpy nodes | idle beside them us | other idle us |")
    print("|---|--:|--:|---|--:|--:|")
    for path in a.traces:
        if not Path(path).is_file():
            p.error(f"no trace at {path}")
        for row in summarize(launch_idle(tr.device_records(tr.load_trace(path)), a.min_records)):
            rows.append({"trace": path} | row)
            nodes = " / ".join(str(row["nodes"].get(c, 0)) for c in ("gpu_memset", "gpu_memcpy"))
            print(
                f"| {Path(path).name} | {row['records']} | {row['launches']} | {nodes} | {row['beside_us']} | "
                f"{row['other_us']} |"
            )
    if a.where:
        for row in rows:
            print(f"\n{Path(row['trace']).name}, the graph of {row['records']} records:")
            for i, cat, before, after in row["sites"]:
                print(f"  {i:5d} {cat:11s} after {(before or '-')[:60]}, before {(after or '-')[:60]}")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
