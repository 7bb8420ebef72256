"""What a captured graph's shape costs the device: one chain of small kernels, replayed step after step, against
the same chain split into two graphs, with a side stream forked at its root, and with the host mirror's external
event wait (the last step's device-to-host copy) on that side stream, after the chain's first kernels, or at the
chain's end.

    python benchmarks/graph_shapes.py --out graph_shapes.json [--kernels 300] [--elems 1024] [--steps 200] [--repeats 5]

Every step replays its graph(s), then copies a small staging buffer to pinned host memory on a copy stream and
records an external event there (the host mirror's ``copy_packed``). Each shape does the same host work and
differs only in its graph, except ``chain_copy_main``, which copies on the step's own stream instead.

Per shape: the device time per step (CUDA events around ``--steps`` steps, the median of ``--repeats``), and from
one profiled pass the median switch from a step's last kernel to the next step's first, and the gaps over
``--min-gap`` us inside a step (by kernel index, medians over the profiled steps).  ``--kernels`` sets the chain's
length: runs at several lengths tell a cost per step from one per kernel.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from specgen.bench import trace_records as tr

SHAPES = {
    "chain": "one graph, one stream",
    "chain_split": "the chain's first quarter in one graph, the rest in a second (a draft graph, then a step graph)",
    "chain_twice": "one graph of half the chain, replayed twice per step (two launches of one graph)",
    "fork_root": "a side stream forked at the root (3 kernels), joined before the pack",
    "fork_root_external": "fork_root, the side stream first waiting on the external event",
    "fork_head_external": "the side stream forked after the chain's first 2 kernels, first waiting on the event",
    "external_main_end": "one stream, waiting on the external event just before the pack",
    "chain_memcpy": "chain with one device-to-device copy node in its middle (a contiguous copy_)",
    "chain_copy_main": "chain, the host copy on the step's own stream after the replay (no copy stream, no event)",
    "chain_memset": "chain with one memset node in its middle (a zero_ of a buffer)",
    "chain_wait_outside": "chain, the step stream waiting on the external event before each replay, outside the graph",
    "chain_mapped": "chain, the pack's kernels writing mapped pinned memory (the host mirror's ``mapped``): no copy",
}

__all__ = ["SHAPES", "replay_gaps", "summarize"]


def replay_gaps(records, min_gap: float = 2.0) -> list[dict]:
    """Per graph launch (its records share a correlation id), in launch order: ``start``, ``end``, and
    ``gaps``: ``(index, us)`` for every kernel that starts more than ``min_gap`` us after all the launch's
    earlier records ended."""
    out = []
    for recs in tr.launches(records):
        gaps = [(i, us) for i, us in enumerate(tr.idle_before(recs), 1) if us > min_gap]
        out.append({"start": recs[0].start, "end": max(r.end for r in recs), "kernels": len(recs), "gaps": gaps})
    return out


def summarize(launches: list[dict], per_step: int = 1) -> dict:
    """Medians over the steps (``per_step`` launches each): the switch from one step's last record to the next
    step's first, the step's span, and each internal gap (keyed ``launch:index``) seen in at least half the steps."""
    steps = [launches[i : i + per_step] for i in range(0, len(launches) - per_step + 1, per_step)]
    switch = [b[0]["start"] - a[-1]["end"] for a, b in zip(steps, steps[1:])]
    spans = [s[-1]["end"] - s[0]["start"] for s in steps]
    seen: dict[str, list[float]] = {}
    for s in steps:
        for j, launch in enumerate(s):
            if j:
                seen.setdefault(f"{j}:0", []).append(launch["start"] - s[j - 1]["end"])
            for i, us in launch["gaps"]:
                seen.setdefault(f"{j}:{i}", []).append(us)
    gaps = {k: round(statistics.median(v), 2) for k, v in sorted(seen.items()) if 2 * len(v) >= len(steps)}
    return {
        "switch_us": round(statistics.median(switch), 2) if switch else None,
        "span_us": round(statistics.median(spans), 2) if spans else None,
        "gaps_us": gaps,
    }


def _graphs(torch, shape: str, n: int, elems: int, event, pool):
    """The shape's captured graph(s) over fresh buffers of ``elems`` floats; returns ``(graphs, staging)``."""
    dev = torch.device("cuda")
    x = torch.zeros(elems, device=dev)
    y = torch.zeros(elems, device=dev)
    staging = torch.zeros(16, device=dev)
    side = torch.cuda.Stream()
    if shape == "chain_mapped":  # the ring the pack writes, row ``turn``, through the host memory's device address
        from specgen.runtime.host_mirror import device_alias

        ring = device_alias(torch.zeros(2, 16, pin_memory=True), dev)
        turn = torch.zeros(1, dtype=torch.int64, device=dev)

    def chain(k: int) -> None:
        for i in range(k):
            if shape == "chain_memcpy" and i == k // 2:
                y.copy_(x)  # same dtype, contiguous: a memcpy node, not a kernel
            if shape == "chain_memset" and i == k // 2:
                y.zero_()  # a memset node
            x.add_(1.0)

    def body(lo: int, hi: int, pack: bool) -> None:
        main = torch.cuda.current_stream()
        fork_at = {"fork_root": 0, "fork_root_external": 0, "fork_head_external": 2}.get(shape)
        chain(min(fork_at, hi - lo) if fork_at is not None else 0)
        if fork_at is not None:
            side.wait_stream(main)
            with torch.cuda.stream(side):
                if shape.endswith("_external"):
                    side.wait_event(event)
                for _ in range(3):
                    y.add_(1.0)
        chain(hi - lo - (fork_at or 0))
        if fork_at is not None:
            main.wait_stream(side)
        if pack:
            if shape == "external_main_end":
                main.wait_event(event)
            staging.copy_(x[:16])
            if shape == "chain_mapped":
                ring.index_copy_(0, turn, staging.view(1, 16))
                turn.bitwise_xor_(1)

    parts = {"chain_split": [(0, n // 4, False), (n // 4, n, True)], "chain_twice": [(0, n // 2, True)]}
    parts = parts.get(shape, [(0, n, True)])
    graphs = []
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for lo, hi, pack in parts:
            body(lo, hi, pack)  # warm-up, eager
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool, stream=s):
                body(lo, hi, pack)
            graphs.append(g)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    return graphs * (2 if shape == "chain_twice" else 1), staging


def _steps(torch, graphs, staging, host, copy, event, steps: int, wait_outside: bool = False, mapped=False) -> None:
    for _ in range(steps):
        if wait_outside:  # the last copy of the staging done before the graph overwrites it, ordered outside it
            torch.cuda.current_stream().wait_event(event)
        for g in graphs:
            g.replay()
        if copy is None and mapped:  # the graph wrote the host memory: only its event, on the step's stream
            event.record(torch.cuda.current_stream())
            continue
        if copy is None:  # the copy in the step's stream order: the next replay waits for it, no event needed
            host.copy_(staging, non_blocking=True)
            continue
        copy.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(copy):
            host.copy_(staging, non_blocking=True)
            event.record(copy)


def measure(shape: str, n: int, elems: int, steps: int, repeats: int, profiled: int, min_gap: float) -> dict:
    import torch

    copy = torch.cuda.Stream()
    event = torch.cuda.Event(external=True)
    event.record(copy)
    graphs, staging = _graphs(torch, shape, n, elems, event, torch.cuda.graph_pool_handle())
    host = torch.zeros(16, pin_memory=True)
    if shape in ("chain_copy_main", "chain_mapped"):
        copy = None
    outside, mapped = shape == "chain_wait_outside", shape == "chain_mapped"
    _steps(torch, graphs, staging, host, copy, event, 10, outside, mapped)
    torch.cuda.synchronize()
    per_step = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        _steps(torch, graphs, staging, host, copy, event, steps, outside, mapped)
        b.record()
        b.synchronize()
        per_step.append(a.elapsed_time(b) * 1000.0 / steps)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        _steps(torch, graphs, staging, host, copy, event, profiled, outside, mapped)
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        records = tr.device_records(tr.load_trace(path))  # a graph's copy nodes too; a host copy: a launch of one
    launches = [launch for launch in replay_gaps(records, min_gap) if launch["kernels"] > 3]
    out = {"step_us": round(statistics.median(per_step), 2), "step_us_repeats": [round(v, 2) for v in per_step]}
    return out | summarize(launches, per_step=len(graphs))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="the JSON to write")
    p.add_argument("--kernels", type=int, default=300, help="kernels in the chain")
    p.add_argument("--elems", type=int, default=1024, help="floats per kernel (a longer kernel: more)")
    p.add_argument("--steps", type=int, default=200, help="timed steps per repeat")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--profiled", type=int, default=12, help="profiled steps")
    p.add_argument("--min-gap", type=float, default=2.0, help="us: the internal gaps reported")
    p.add_argument("--shapes", default=",".join(SHAPES), help="comma list of " + ", ".join(SHAPES))
    a = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("graph_shapes: needs a CUDA device", file=sys.stderr)
        return 2
    shapes = a.shapes.split(",")
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        p.error(f"unknown shapes {unknown}; known: {', '.join(SHAPES)}")
    result = {"device": torch.cuda.get_device_name(), "args": vars(a), "shapes": {}}
    print("| shape | step us | switch us | span us | gaps over the minimum (launch:index us) |")
    print("|---|--:|--:|--:|---|")
    for shape in shapes:
        r = measure(shape, a.kernels, a.elems, a.steps, a.repeats, a.profiled, a.min_gap)
        result["shapes"][shape] = {"what": SHAPES[shape]} | r
        gaps = ", ".join(f"{k} {v}" for k, v in r["gaps_us"].items())
        print(f"| {shape} | {r['step_us']} | {r['switch_us']} | {r['span_us']} | {gaps} |", flush=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
