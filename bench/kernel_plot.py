"""``kernel_timeline.png``: the device's kernels over a few profiled steps, one lane per mode; and
``kernel_breakdown.png``: a step's device time by kind of kernel (``kernel_breakdown``), one bar per mode.

Drawn from the traces the bench's kernel-level pass saved (``bench_profile``):
per (depth, batch) one panel, per mode one lane starting at its first
profiled draft kernel; each device record is a bar colored by what it is
(draft, head = boundary work before the forward, forward, tail = after it),
and every draft->verify gap (last draft record to first forward kernel) is
annotated with its length in microseconds.
"""

from __future__ import annotations

from pathlib import Path

from . import kernel_breakdown as kb
from . import kernel_timeline as kt
from .profiler import read_trace

__all__ = ["COLORS", "breakdown_figure", "breakdowns_from_traces", "kernel_figure", "plot_breakdown", "plot_kernels"]

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


def _save(draw, folder: Path, name: str) -> Path | None:
    """The figure ``draw()`` gives, saved as ``folder/name``; None without matplotlib or without a figure."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig = draw()
    if fig is None:
        return None
    path = Path(folder) / name
    try:
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)
    return path


def plot_kernels(result: dict, folder: Path, steps: int = 3) -> Path | None:
    """``kernel_timeline.png`` in ``folder``; None without matplotlib or without saved traces."""
    return _save(lambda: kernel_figure(result, folder, steps), folder, "kernel_timeline.png")


def breakdowns_from_traces(result: dict, folder: Path) -> int:
    """Give every run of ``result`` with a saved trace in ``folder`` and no ``kernel_breakdown`` one, computed from
    the trace (a bench.json written before the field existed); returns how many runs gained one."""
    added = 0
    for r in result.get("runs", []):
        path = Path(folder) / r["kernel_trace"] if r.get("kernel_trace") else None
        if r.get("kernel_breakdown") is None and path is not None and path.is_file():
            events, forward, draft = read_trace(path)
            r["kernel_breakdown"] = kb.step_breakdown(kt.attribute(events, draft), forward)
            added += r["kernel_breakdown"] is not None
    return added


def breakdown_figure(result: dict):
    """One panel per (depth, batch), one bar per mode: a step's device time stacked by kind of kernel, its
    boundary part written beside it; None when no run has a breakdown."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    runs = [r for r in result.get("runs", []) if r.get("kernel_breakdown")]
    if not runs:
        return None
    keys = sorted({(r["depth"], r["batch"]) for r in runs})
    colors = dict(zip([c for c, _ in kb.KERNEL_CLASSES], plt.get_cmap("tab20").colors[::2] + ((0.6,) * 3,)))
    fig, axes = plt.subplots(
        len(keys), 1, figsize=(11, 1.3 + 0.45 * len(runs) + 0.5 * len(keys)), squeeze=False, layout="constrained"
    )
    for ax, key in zip(axes[:, 0], keys):
        group = [r for r in runs if (r["depth"], r["batch"]) == key]
        for y, r in enumerate(group):
            parts = r["kernel_breakdown"]["parts"]
            left = 0.0
            for cls, _ in kb.KERNEL_CLASSES:
                width = sum(parts[p].get(cls, 0.0) for p in kb.PARTS)
                if width > 0:
                    ax.barh(y, width, left=left, height=0.6, color=colors[cls], edgecolor="white", linewidth=0.3)
                    left += width
            boundary = sum(parts["boundary"].values())
            ax.text(left, y, f" {left:.0f} us (boundary {boundary:.1f})", va="center", fontsize=7)
        ax.set_yticks(range(len(group)), [r["mode"] for r in group])
        ax.invert_yaxis()
        ax.set_xlim(0, 1.2 * max(sum(sum(p.values()) for p in r["kernel_breakdown"]["parts"].values()) for r in group))
        ax.set_title(f"depth {key[0]}, batch {key[1]}: device time per step by kind of kernel", fontsize=9)
    axes[-1, 0].set_xlabel("microseconds per step (kernel-level pass; records on two streams both count)")
    shown = {c for r in runs for p in r["kernel_breakdown"]["parts"].values() for c in p}
    fig.legend(
        handles=[Patch(facecolor=colors[c], label=c) for c, _ in kb.KERNEL_CLASSES if c in shown],
        loc="outside lower center",
        ncol=6,
        fontsize=7,
        frameon=False,
    )
    env = result.get("environment") or {}
    fig.suptitle(
        f"specgen bench, where a step goes: {result.get('model', '?')} on {env.get('device', '?')}", fontsize=10
    )
    return fig


def plot_breakdown(result: dict, folder: Path) -> Path | None:
    """``kernel_breakdown.png`` in ``folder``; None without matplotlib or without a run's breakdown."""
    return _save(lambda: breakdown_figure(result), folder, "kernel_breakdown.png")
