"""The bench's output: the console table, the timeline picture and the files in the output folder."""

from __future__ import annotations

import json
from pathlib import Path

from .bench import SUBJECT, log

__all__ = ["PHASES", "plot", "table", "write"]

PHASES = (("draft", "draft_us", "#8da0cb"), ("draft->verify boundary", "draft_to_verify_us", "#fc8d62"),
          ("verify graph", "bare_verify_us", "#66c2a5"), ("verify->draft gap", "verify_to_draft_us", "#e78ac3"))


def table(result: dict) -> str:
    """The runs as aligned columns, then the TPOT ratios, skipped modes and failures."""
    cols = [("depth", "depth"), ("batch", "B"), ("mode", "mode"), ("tpot_ms", "TPOT ms"),
            ("tokens_per_s", "tok/s"), ("draft_to_verify_us", "d->v us"), ("verify_to_draft_us", "v->d us"),
            ("bare_verify_us", "verify us"), ("draft_us", "draft us"), ("host_syncs_per_step", "syncs/step"),
            ("acceptance", "accept")]
    ok = [r for r in result["runs"] if "error" not in r]
    rows = [[("" if r.get(k) is None else str(r.get(k))) for k, _ in cols] for r in ok]
    head = [h for _, h in cols]
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    line = lambda vals: "  ".join(v.rjust(w) for v, w in zip(vals, widths))  # noqa: E731
    out = [line(head), line(["-" * w for w in widths])] + [line(r) for r in rows]
    for r in result["ratios"]:
        parts = [f"{k[8:]} {v * 100:+.1f}%" for k, v in r.items() if k.startswith("tpot_vs_")]
        out.append(f"depth {r['depth']} B={r['batch']}: {SUBJECT} TPOT vs " + ", ".join(parts))
    for m, why in result["skipped_modes"].items():
        out.append(f"{m}: {why}")
    for r in result["runs"]:
        if "error" in r:
            out.append(f"depth {r['depth']} B={r['batch']} {r['mode']}: failed: {r['error']}")
    return "\n".join(out)


def plot(result: dict, path: Path) -> Path | None:
    """One step per mode as a timeline (one panel per depth x batch); None when matplotlib is absent."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    groups = {}
    for r in result["runs"]:
        if "error" not in r:
            groups.setdefault((r["depth"], r["batch"]), []).append(r)
    keys = sorted(groups)
    fig, axes = plt.subplots(len(keys), 1, figsize=(10, 1.2 + 1.1 * len(keys) * 1.4), squeeze=False)
    for ax, key in zip(axes[:, 0], keys):
        rows = groups[key]
        for y, r in enumerate(rows):
            x = 0.0
            for label, field, color in PHASES:
                w = r.get(field)
                if w is None:
                    continue
                w = max(float(w), 0.0)
                ax.barh(y, w, left=x, color=color, edgecolor="black", linewidth=0.3,
                        label=label if (key == keys[0] and y == 0) else None)
                x += w
            syncs = r.get("host_syncs_per_step")
            note = f"  {r['tpot_ms']} ms/token" + (f", {syncs:g} host syncs/step" if syncs is not None else "")
            ax.text(x, y, note, va="center", fontsize=7)
        ax.set_yticks(range(len(rows)), [r["mode"] for r in rows])
        ax.set_title(f"depth {key[0]}, batch {key[1]}: one decode step", fontsize=9)
        ax.set_xlabel("microseconds (median step)")
        ax.margins(x=0.4)
    axes[0, 0].legend(loc="upper center", bbox_to_anchor=(0.5, 1.6), ncol=4, fontsize=7)
    fig.suptitle(f"specgen bench: {result['model']} on {result['environment']['device']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write(result: dict, out: Path) -> list[Path]:
    """``bench.json`` and, where matplotlib is installed, ``timeline.png`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "bench.json"]
    paths[0].write_text(json.dumps(result, indent=1) + "\n")
    png = plot(result, out / "timeline.png")
    if png is None:
        log("bench: matplotlib is not installed, so no timeline.png (pip install 'specgen[plot]', then "
             f"specgen bench --replot {paths[0]})")
    else:
        paths.append(png)
    return paths

