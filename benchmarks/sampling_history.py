"""What sampling adds to specgen's step, commit by commit: a table and a picture from the recorded benches.

    python benchmarks/sampling_history.py [--out benchmarks/results/sampling/sampling_adds.png]

Each folder of ``benchmarks/results/sampling/`` that holds a greedy bench and a sampled one of the same call (the
same ``specgen bench`` command without and with ``--temperature 0.7 --top-p 0.9``) gives, per batch, specgen's
sampled step minus its greedy step: ``bench_greedy.json`` with ``bench_kernels.json`` (the H200 calls), else
``engine/bench_greedy.json`` with ``engine/bench_sampled_new.json`` or ``engine/bench_sampled.json``, else
``bench_greedy.json`` with ``bench_sampled_onehot.json``; and the torch ops' (``bench_torch.json``,
``SPECGEN_VOCAB_KERNELS=0``) where the folder has them. The GPU is the one the greedy bench names. Folders run in
``ORDER``, then by their commit's time (the folder name's leading hash, through git), then by name; the issue's
goal (10 us at B = 1, 40 us at B = 32, on the H200) is drawn. Compare a commit with the one before it on the same
GPU only.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent / "results" / "sampling"
GOAL_US = {1: 10.0, 32: 40.0}
ORDER = ("5742a51_vocab_kernels", "555fbdb_chunked", "34c4d2f_instructions", "9b635c0_registers")


def _steps(path: Path) -> dict[int, float]:
    runs = json.loads(path.read_text())["runs"]
    return {r["batch"]: r["step_us"] for r in runs if r["mode"] == "specgen" and "error" not in r}


PAIRS = (  # (greedy bench, sampled bench) of one call, the first a folder has
    ("bench_greedy.json", "bench_kernels.json"),
    ("engine/bench_greedy.json", "engine/bench_sampled_new.json"),
    ("engine/bench_greedy.json", "engine/bench_sampled.json"),
    ("bench_greedy.json", "bench_sampled_onehot.json"),
)


def _pair(folder: Path) -> tuple[Path, Path] | None:
    return next(((folder / g, folder / s) for g, s in PAIRS if (folder / g).exists() and (folder / s).exists()), None)


def _gpu(path: Path) -> str:
    """The GPU a bench ran on, in short (``H200``, ``H100``), from its ``environment``; ``?`` where it says none."""
    name = (json.loads(path.read_text()).get("environment") or {}).get("device") or "?"
    return next((w for w in name.split() if w[:1] in "ABHL" and any(c.isdigit() for c in w)), name)


def _commit_time(folder: Path) -> int | None:
    """The Unix time of the commit the folder's name starts with, or None where git does not know it."""
    rev = folder.name.split("_")[0]
    try:
        got = subprocess.run(
            ["git", "show", "-s", "--format=%ct", rev + "^{commit}"],
            cwd=folder,
            text=True,
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return int(got.stdout.strip()) if got.returncode == 0 and got.stdout.strip().isdigit() else None


def history(root: Path = ROOT) -> list[dict]:
    """One row per recorded folder: ``{"folder", "gpu", "adds": {B: us}, "torch_adds": {B: us}}``."""
    named = [root / name for name in ORDER if (root / name).is_dir()]
    rest = [f for f in root.iterdir() if f.is_dir() and f.name not in ORDER]
    timed = {f: _commit_time(f) for f in rest}
    rest.sort(key=lambda f: (timed[f] is None, timed[f] or 0, f.name))
    rows = []
    for folder in named + rest:
        pair = _pair(folder)
        if pair is None:
            continue
        greedy, sampled = _steps(pair[0]), _steps(pair[1])
        row = {"folder": folder.name, "gpu": _gpu(pair[0])}
        row["adds"] = {b: sampled[b] - greedy[b] for b in sorted(greedy) if b in sampled}
        if (folder / "bench_torch.json").exists():
            torch_ops = _steps(folder / "bench_torch.json")
            row["torch_adds"] = {b: torch_ops[b] - greedy[b] for b in sorted(greedy) if b in torch_ops}
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    batches = sorted({b for r in rows for b in r["adds"]})
    lines = ["| commit | GPU | " + " | ".join(f"B = {b} (us)" for b in batches) + " |"]
    lines.append("|---|---|" + "--:|" * len(batches))
    for r in rows:
        cells = " | ".join(f"{r['adds'].get(b, float('nan')):.0f}" for b in batches)
        lines.append(f"| {r['folder']} | {r.get('gpu', '?')} | {cells} |")
    return "\n".join(lines)


def plot(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    batches = sorted({b for r in rows for b in r["adds"]})
    gpus = list(dict.fromkeys(r.get("gpu", "?") for r in rows))
    fig, ax = plt.subplots(figsize=(9, 4.6))
    colors = {}
    for n, gpu in enumerate(gpus):
        style = dict(linestyle="-" if n == 0 else "--", marker="os^v"[n % 4])
        for b in batches:
            pts = [(x, r["adds"][b]) for x, r in enumerate(rows) if r.get("gpu", "?") == gpu and b in r["adds"]]
            line = ax.plot(*zip(*pts), color=colors.get(b), label=f"B = {b}, {gpu}", **style)[0] if pts else None
            colors.setdefault(b, line.get_color() if line else None)
    for b in batches:
        if b in GOAL_US:
            goal = f"goal at B = {b}: {GOAL_US[b]:.0f} us"
            ax.axhline(GOAL_US[b], linestyle=":", linewidth=1, color=colors.get(b), label=goal)
    torch_at = next((x for x in reversed(range(len(rows))) if "torch_adds" in rows[x]), None)
    if torch_at is not None:
        for b in batches:
            ax.scatter([torch_at], [rows[torch_at]["torch_adds"][b]], marker="x", color="grey")
        ax.scatter([], [], marker="x", color="grey", label="torch ops")
    ax.set_yscale("log")
    ax.set_xticks(range(len(rows)), [r["folder"].split("_")[0] for r in rows], rotation=45, fontsize=8)
    ax.set_ylabel("sampling adds per step (us, log)")
    ax.set_title("Sampled verification's cost over specgen's greedy step (Qwen3-0.6B, MTP 3)")
    ax.legend(fontsize=7, ncol=2)
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
