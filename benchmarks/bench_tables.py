"""The bench tables of docs/results.md, printed as Markdown from a ``bench.json`` (``specgen bench --out``).

    python benchmarks/bench_tables.py benchmarks/results/performance/qwen3-0.6b/bench.json [more.json ...]

One TPOT table per file and depth (every mode the run has, specgen's ratios against the
others), then one kernel-level boundary table over every depth and batch: specgen's
``kernel_draft_to_verify_us`` against the bare reference (the draft graph followed by the
bare forward graph) and against ``compile``, with the margin the issue's goal names
(<= 3 us over the bare reference and <= compile's).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ORDER = ("baseline", "compile", "inductor", "specgen")
GOAL_OVER_BARE_US = 3.0


def _fmt(x, digits: int = 1) -> str:
    return "" if x is None else f"{x:.{digits}f}"


def _runs(result: dict) -> dict[tuple[int, int], dict[str, dict]]:
    out: dict = {}
    for r in result["runs"]:
        if "error" not in r:
            out.setdefault((r["depth"], r["batch"]), {})[r["mode"]] = r
    return out


def tpot_table(result: dict, depth: int) -> str:
    runs = _runs(result)
    modes = [m for m in ORDER if any(m in v for (d, _), v in runs.items() if d == depth)]
    others = [m for m in modes if m != "specgen"]
    short = "/".join(m[0] for m in modes)
    head = (
        f"| B | TPOT ms ({short}) | specgen vs {' / '.join(others)} | k d->v us ({short}) | bare k d->v us "
        f"| specgen head us | k v->d us ({short}) | bare verify us | draft us | capture s ({short}) | accept |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for (d, b), by_mode in sorted(runs.items()):
        if d != depth:
            continue
        s = by_mode.get("specgen", {})
        row = lambda key, digits=1: " / ".join(_fmt(by_mode.get(m, {}).get(key), digits) for m in modes)  # noqa: E731
        ratios = [
            f"{(s['tpot_ms'] / by_mode[m]['tpot_ms'] - 1) * 100:+.1f}%"
            for m in others
            if s.get("tpot_ms") and by_mode.get(m, {}).get("tpot_ms")
        ]
        any_run = next(iter(by_mode.values()))
        lines.append(
            f"| {b} | {row('tpot_ms', 3)} | {' / '.join(ratios)} | {row('kernel_draft_to_verify_us')} "
            f"| {_fmt(any_run.get('bare_kernel_draft_to_verify_us'))} | {_fmt(s.get('head_us'))} "
            f"| {row('kernel_verify_to_draft_us')} | {_fmt(any_run.get('bare_verify_us'), 0)} "
            f"| {_fmt(s.get('draft_us'), 0)} | {row('capture_s', 2)} | {_fmt(s.get('acceptance'), 2)} |"
        )
    return "\n".join(lines)


def boundary_table(results: list[tuple[str, dict]]) -> str:
    lines = [
        "| model | depth | B | specgen k d->v us | bare k d->v us | over bare (goal <= 3) | compile k d->v us "
        "| <= compile | head us |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, result in results:
        for (d, b), by_mode in sorted(_runs(result).items()):
            s, c = by_mode.get("specgen"), by_mode.get("compile")
            if s is None or s.get("kernel_draft_to_verify_us") is None:
                continue
            gap, bare = s["kernel_draft_to_verify_us"], s.get("bare_kernel_draft_to_verify_us")
            over = None if bare is None else gap - bare
            cgap = c.get("kernel_draft_to_verify_us") if c else None
            ok_bare = "" if over is None else ("yes" if over <= GOAL_OVER_BARE_US else "**no**")
            ok_c = "" if cgap is None else ("yes" if gap <= cgap else "**no**")
            lines.append(
                f"| {name} | {d} | {b} | {_fmt(gap)} | {_fmt(bare)} | {_fmt(over)} ({ok_bare}) "
                f"| {_fmt(cgap)} | {ok_c} | {_fmt(s.get('head_us'))} |"
            )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("bench", nargs="+", type=Path, help="bench.json files")
    args = p.parse_args(argv)
    results = [(json.loads(f.read_text()).get("model", f.parent.name), json.loads(f.read_text())) for f in args.bench]
    for name, result in results:
        for depth in sorted({r["depth"] for r in result["runs"]}):
            print(f"**{name}**, depth {depth}:\n\n{tpot_table(result, depth)}\n")
    print(boundary_table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
