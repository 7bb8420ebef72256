"""``compare.png`` beside ``compare.json``: the cost model's predictions against the measurements, one point a cell.

Three panels: draft->verify and verify->draft (log-log, predicted against the kernel-level measurement, with
the goal's band of max(25%, 3 us) around the diagonal; a host-bound bubble's second judgment, against the
unprofiled event-level figure, as a hollow marker of the same colour) and TPOT (predicted against measured,
the 10% band).  Drawn where matplotlib is installed; ``plot`` returns None where it is not.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .plan_compare_cells import BUBBLES, GOAL

__all__ = ["plot"]

COLORS = {"baseline": "#7f7f7f", "compile": "#d62728", "inductor": "#1f77b4", "specgen": "#2ca02c"}


def plot(doc: dict, path: Path) -> Path | None:
    """Draw ``doc`` (compare.json's document) into ``path``; None when matplotlib is not installed or no cell
    has a measured figure."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    cells = doc["cells"]
    if not any(c[p]["measured_us"] is not None for c in cells for p in BUBBLES):
        return None
    fig, axes = plt.subplots(1, 3, figsize=(15, 5.2))
    for ax, (part, boundary) in zip(axes, BUBBLES.items()):
        _bubbles(ax, cells, part, boundary)
    _tpot(axes[2], cells)
    handles = [plt.Line2D([], [], marker="o", ls="", color=c, label=m) for m, c in COLORS.items() if _has(cells, m)] + [
        plt.Line2D([], [], marker="o", ls="", mfc="none", color="k", label="host-bound, unprofiled")
    ]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False)
    tally = ", ".join(
        f"{k.replace('_', ' ')} {v['within_goal']}/{v['measured']}" for k, v in doc.get("summary", {}).items()
    )
    fig.suptitle(f"predicted against measured: {doc.get('bench', '')}\nwithin the goal: {tally}", fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 0.93))
    try:
        fig.savefig(path, dpi=110)
    except OSError as e:  # the table and compare.json stand without the picture
        print(f"plan --compare: cannot write {path} ({e.strerror or e})", file=sys.stderr)
        return None
    finally:
        plt.close(fig)
    return path


def _has(cells: list[dict], mode: str) -> bool:
    return any(c["mode"] == mode for c in cells)


def _bubbles(ax, cells: list[dict], part: str, boundary: str) -> None:
    """One boundary's panel: a point a cell (hollow: the unprofiled judgment), the diagonal and the goal band."""
    xs = []
    for c in cells:
        f, color = c[part], COLORS.get(c["mode"], "k")
        if f["measured_us"] is not None and f["predicted_us"] is not None:
            ax.scatter(max(f["measured_us"], 0.1), max(f["predicted_us"], 0.1), color=color, s=28, zorder=3)
            xs += [f["measured_us"], f["predicted_us"]]
        u = f.get("unprofiled")
        if u and u["measured_us"] is not None and u["predicted_us"] is not None and u["measured_us"] > 0:
            ax.scatter(u["measured_us"], max(u["predicted_us"], 0.1), facecolors="none", edgecolors=color, s=40)
            xs += [u["measured_us"]]
    xs = [x for x in xs if x > 0]  # a log axis: a figure at or below zero is drawn at its floor
    lo = max(min(xs, default=1.0) / 2, 0.5)
    hi = max(max(xs, default=10.0) * 2, lo * 10)
    grid = [lo * (hi / lo) ** (i / 99) for i in range(100)]
    band = [max(GOAL["bubble_rel"] * m, GOAL["bubble_us"]) for m in grid]
    ax.fill_between(grid, [max(m - b, lo) for m, b in zip(grid, band)], [m + b for m, b in zip(grid, band)],
                    color="#2ca02c", alpha=0.12, lw=0, label="goal")  # fmt: skip
    ax.plot(grid, grid, color="k", lw=0.8)
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), title=boundary)
    ax.set_xlabel("measured (us): kernel level; hollow: events, unprofiled")
    ax.set_ylabel("predicted (us)")


def _tpot(ax, cells: list[dict]) -> None:
    """TPOT: predicted against measured (ms), the 10% band around the diagonal."""
    pts = [(c["tpot"]["measured_ms"], c["tpot"]["predicted_ms"], c["mode"]) for c in cells]
    pts = [p for p in pts if p[0] is not None and p[1] is not None]
    for m, p, mode in pts:
        ax.scatter(m, p, color=COLORS.get(mode, "k"), s=28, zorder=3)
    vals = [v for p in pts for v in p[:2]] or [0.0, 1.0]
    lo, hi = min(vals) * 0.85, max(vals) * 1.15
    grid = [lo + (hi - lo) * i / 99 for i in range(100)]
    rel = GOAL["tpot_rel"]
    ax.fill_between(grid, [g * (1 - rel) for g in grid], [g * (1 + rel) for g in grid], color="#2ca02c",
                    alpha=0.12, lw=0)  # fmt: skip
    ax.plot(grid, grid, color="k", lw=0.8)
    ax.set(xlim=(lo, hi), ylim=(lo, hi), title="TPOT", xlabel="measured (ms)", ylabel="predicted (ms)")
