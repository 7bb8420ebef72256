"""``kernel_timeline.png``: the device's kernels over a few profiled steps, one lane per mode.

Drawn from the traces the bench's kernel-level pass saved (``bench_profile``):
per (depth, batch) one panel, per mode one lane starting at its first
profiled draft kernel; each device record is a bar colored by what it is
(draft, head = boundary work before the forward, forward, tail = after it),
and every draft->verify gap (last draft record to first forward kernel) is
annotated with its length in microseconds.
"""

from __future__ import annotations

from pathlib import Path

from . import kernel_timeline as kt
from .profiler import read_trace

__all__ = ["COLORS", "kernel_figure", "plot_kernels"]

COLORS = {"draft": "#8da0cb", "head": "#fc8d62", "forward": "#66c2a5", "tail": "#e78ac3"}


def _lanes(result: dict, folder: Path, steps: int) -> dict[tuple[int, int], list[tuple[str, list, list]]]:
    """(depth, batch) -> [(mode, [(start, end, kind)], [(gap start, gap end)])], times from the lane's start."""
    out: dict = {}
    for r in result.get("runs", []):
        name = r.get("kernel_trace")
        path = folder / name if name else None
        if path is None or not path.exists():
            continue
        events, forward, draft = read_trace(path)
        by_step = kt.attribute(events, draft)
        keys = [k for k in by_step if by_step[k].draft][:steps]
        if not keys:
            continue
        t0 = min(rec.start for rec in by_step[keys[0]].draft)
        bars, gaps = [], []
        for k in keys:
            labelled = kt.classify(by_step[k], forward)
            bars += [(rec.start - t0, rec.end - t0, kind) for rec, kind in labelled]
            fwd = [rec.start for rec, kind in labelled if kind == "forward"]
            if fwd and by_step[k].draft:
                gaps.append((max(rec.end for rec in by_step[k].draft) - t0, min(fwd) - t0))
        out.setdefault((r["depth"], r["batch"]), []).append((r["mode"], bars, gaps))
    return out


def kernel_figure(result: dict, folder: Path, steps: int = 3):
    """The figure, or None when no run has a saved trace."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    lanes = _lanes(result, Path(folder), steps)
    if not lanes:
        return None
    keys = sorted(lanes)
    heights = [0.7 + 0.45 * len(lanes[k]) for k in keys]
    fig, axes = plt.subplots(
        len(keys),
        1,
        figsize=(13, 1.2 + sum(heights)),
        squeeze=False,
        layout="constrained",
        gridspec_kw={"height_ratios": heights},
    )
    for ax, key in zip(axes[:, 0], keys):
        rows = lanes[key]
        for y, (_mode, bars, gaps) in enumerate(rows):
            for kind in COLORS:
                spans = [(s, max(e - s, 0.05)) for s, e, k in bars if k == kind]
                if spans:
                    ax.broken_barh(spans, (y - 0.32, 0.64), facecolors=COLORS[kind], edgecolor="none")
            for lo, hi in gaps:
                ax.annotate("", xy=(hi, y + 0.42), xytext=(lo, y + 0.42), arrowprops={"arrowstyle": "<->", "lw": 0.6})
                ax.text((lo + hi) / 2, y + 0.46, f"{hi - lo:.1f}", ha="center", va="bottom", fontsize=6)
        ax.set_yticks(range(len(rows)), [m for m, _, _ in rows])
        ax.set_ylim(-0.6, len(rows) - 0.1)
        ax.set_title(f"depth {key[0]}, batch {key[1]}: {steps} profiled steps (gaps: draft->verify, us)", fontsize=9)
    axes[-1, 0].set_xlabel("microseconds from the lane's first draft kernel (device clock)")
    fig.legend(
        handles=[Patch(facecolor=c, label=k) for k, c in COLORS.items()],
        loc="outside lower center",
        ncol=4,
        fontsize=7,
        frameon=False,
    )
    env = result.get("environment") or {}
    fig.suptitle(f"specgen bench kernels: {result.get('model', '?')} on {env.get('device', '?')}", fontsize=10)
    return fig


def plot_kernels(result: dict, folder: Path, steps: int = 3) -> Path | None:
    """``kernel_timeline.png`` in ``folder``; None without matplotlib or without saved traces."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig = kernel_figure(result, folder, steps)
    if fig is None:
        return None
    path = Path(folder) / "kernel_timeline.png"
    try:
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)
    return path
