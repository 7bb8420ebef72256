"""The table of a ``tree_ab.sh`` run: per mode, depth and batch, each tree's median over its rounds of the
step time, TPOT and the kernel-level boundary gaps (``bench.json`` of ``base_<r>/`` and ``new_<r>/``), and the
change.  Usage: ``python benchmarks/tree_ab.py OUT_DIR [A B]`` (prints Markdown; writes ``OUT_DIR/ab.json``).
Any A/B whose rounds sit in ``<A>_<r>/`` and ``<B>_<r>/`` reads the same way (``h200.sh guard-ab``: ``on`` and
``off``, the device guard with and without)."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

FIGURES = ("step_us", "tpot_ms", "kernel_draft_to_verify_us", "kernel_verify_to_draft_us", "host_syncs_per_step")
# a block draft's figures after the verification (the table leaves out a figure neither tree has)
BLOCK_FIGURES = ("projection_us", "kernel_post_verify_us", "post_verify_idle_us")


def collect(out: Path) -> dict:
    """``{(mode, depth, batch): {tree: {figure: [per round]}}}`` from every round's ``bench.json``."""
    cells: dict = {}
    for path in sorted(out.glob("*_*/bench.json")):
        tree = path.parent.name.split("_")[0]
        for run in json.loads(path.read_text())["runs"]:
            key = (run["mode"], run["depth"], run["batch"])
            names = FIGURES + BLOCK_FIGURES + ("equals_target_reference",)
            figs = cells.setdefault(key, {}).setdefault(tree, {f: [] for f in names})
            for f in names:
                figs[f].append(run.get(f))
    return cells


def median(values: list) -> float | None:
    got = [v for v in values if v is not None]
    return round(statistics.median(got), 3) if got else None


def table(cells: dict, base: str = "base", new: str = "new") -> tuple[str, list[dict]]:
    rows = []
    lines = [f"| mode | depth | B | figure | {base} | {new} | change |", "|---|--:|--:|---|--:|--:|--:|"]
    for (mode, depth, batch), trees in sorted(cells.items()):
        for f in FIGURES + BLOCK_FIGURES:
            b, n = median(trees.get(base, {}).get(f, [])), median(trees.get(new, {}).get(f, []))
            if f in BLOCK_FIGURES and b is None and n is None:
                continue
            change = f"{100 * (n - b) / b:+.1f}%" if b and n is not None else ""
            rows.append({"mode": mode, "depth": depth, "batch": batch, "figure": f, base: b, new: n})
            lines.append(f"| {mode} | {depth} | {batch} | {f} | {b} | {n} | {change} |")
        exact = [all(trees.get(t, {}).get("equals_target_reference") or [False]) for t in (base, new)]
        rows.append({"mode": mode, "depth": depth, "batch": batch, "figure": "lossless", base: exact[0]})
        rows[-1][new] = exact[1]
    return "\n".join(lines), rows


def main(out: Path, base: str = "base", new: str = "new") -> None:
    text, rows = table(collect(out), base, new)
    (out / "ab.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(text)


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:4])
