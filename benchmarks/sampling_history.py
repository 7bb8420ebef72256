"""What sampling adds to specgen's step, commit by commit: a table and a picture from the recorded benches.

    python benchmarks/sampling_history.py [--out benchmarks/results/sampling/sampling_adds.png]

Each folder of ``benchmarks/results/sampling/`` that holds ``bench_greedy.json`` and ``bench_kernels.json``
(the same ``specgen bench`` command without and with ``--temperature 0.7 --top-p 0.9``, one H200 call) gives,
per batch, specgen's sampled step minus its greedy step, and the torch ops' (``bench_torch.json``,
``SPECGEN_VOCAB_KERNELS=0``) where the folder has them. Folders are ordered by their greedy run's time stamp
when the bench wrote one, else by name; the issue's goal (10 us at B = 1, 40 us at B = 32) is drawn.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent / "results" / "sampling"
GOAL_US = {1: 10.0, 32: 40.0}
ORDER = ("5742a51_vocab_kernels", "555fbdb_chunked", "34c4d2f_instructions", "9b635c0_registers")


def _steps(path: Path) -> dict[int, float]:
    runs = json.loads(path.read_text())["runs"]
    return {r["batch"]: r["step_us"] for r in runs if r["mode"] == "specgen" and "error" not in r}


def history(root: Path = ROOT) -> list[dict]:
    """One row per recorded folder: ``{"folder", "adds": {B: us}, "torch_adds": {B: us}}``."""
    folders = [root / name for name in ORDER if (root / name / "bench_kernels.json").exists()]
    folders += sorted(
        f for f in root.iterdir() if f.is_dir() and f.name not in ORDER and (f / "bench_greedy.json").exists()
    )
    rows = []
    for folder in folders:
        if not (folder / "bench_greedy.json").exists() or not (folder / "bench_kernels.json").exists():
            continue
        greedy, sampled = _steps(folder / "bench_greedy.json"), _steps(folder / "bench_kernels.json")
        row = {"folder": folder.name, "adds": {b: sampled[b] - greedy[b] for b in sorted(greedy) if b in sampled}}
        if (folder / "bench_torch.json").exists():
            torch_ops = _steps(folder / "bench_torch.json")
            row["torch_adds"] = {b: torch_ops[b] - greedy[b] for b in sorted(greedy) if b in torch_ops}
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    batches = sorted({b for r in rows for b in r["adds"]})
    lines = ["| commit | " + " | ".join(f"B = {b} (us)" for b in batches) + " |"]
    lines.append("|---|" + "--:|" * len(batches))
    for r in rows:
        cells = " | ".join(f"{r['adds'].get(b, float('nan')):.0f}" for b in batches)
        lines.append(f"| {r['folder']} | {cells} |")
    return "\n".join(lines)


def plot(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    batches = sorted({b for r in rows for b in r["adds"]})
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    xs = range(len(rows))
    for b in batches:
        ax.plot(xs, [r["adds"].get(b) for r in rows], marker="o", label=f"B = {b}, vocabulary kernels")
        if b in GOAL_US:
            color = ax.lines[-1].get_color()
            goal = f"goal at B = {b}: {GOAL_US[b]:.0f} us"
            ax.axhline(GOAL_US[b], linestyle=":", linewidth=1, color=color, label=goal)
    torch_last = next((r["torch_adds"] for r in reversed(rows) if "torch_adds" in r), None)
    if torch_last:
        for b in batches:
            ax.scatter([len(rows) - 1], [torch_last[b]], marker="x", color="grey")
        ax.scatter([], [], marker="x", color="grey", label="torch ops, last commit")
    ax.set_yscale("log")
    ax.set_xticks(list(xs), [r["folder"].split("_")[0] for r in rows])
    ax.set_ylabel("sampling adds per step (us, log)")
    ax.set_title("Sampled verification's cost over specgen's greedy step (H200, Qwen3-0.6B, MTP 3)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "sampling_adds.png")
    args = ap.parse_args()
    rows = history()
    print(table(rows))
    plot(rows, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
