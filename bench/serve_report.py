"""The serving benchmark's output: a row per run, the console table, ``serve_bench.json`` and two pictures.

``latency_vs_rate.png``: TPOT p50 and p99 and TTFT p50 against the load, one
line per mode.  ``timeline.png``: for one load, the running batch per decode
step of each mode, fast-path and fallback steps marked.  matplotlib is
imported only to draw them; without it the files are written and one line says
so.
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

from .support import log

__all__ = [
    "LEGEND",
    "RESULT_FILE",
    "failures",
    "ok_runs",
    "plot_latency",
    "plot_timeline",
    "plot_transition_idle",
    "row",
    "table",
    "write",
    "write_partial",
]

RESULT_FILE = "serve_bench.json"
LEGEND = (
    "columns: req/s = finished requests per second; tok/s = output tokens per second; TTFT = arrival to first "
    "token, TPOT = time per output token after the first, ITL = gap between tokens (ms, p50/p90/p99 over "
    "requests, ITL over tokens); accept = accepted drafts over drafts; fast = share of steps on the fast path; "
    "fallbacks = steps off it by reason; moved = steps whose rows changed, by the remap kernel or in torch and "
    "why; wall = the run's wall time"
)
COLUMNS = (
    ("load", "load"),
    ("mode", "mode"),
    ("finished", "done"),
    ("request_throughput", "req/s"),
    ("output_tokens_per_s", "tok/s"),
    ("ttft_ms", "TTFT ms"),
    ("tpot_ms", "TPOT ms"),
    ("itl_ms", "ITL ms"),
    ("acceptance", "accept"),
    ("fast_path_share", "fast"),
    ("fallbacks", "fallbacks"),
    ("moved", "moved"),
    ("preemptions", "preempt"),
    ("host_syncs_per_step", "syncs/step"),
    ("wall_s", "wall s"),
)


def ok_runs(result: dict) -> list[dict]:
    return [r for r in result["runs"] if "error" not in r]


def failures(result: dict) -> list[str]:
    """One line per run that raised."""
    return [f"mode {r['mode']} failed at load {r['load']}: {r['error']}" for r in result["runs"] if "error" in r]


def _ms(p: dict) -> str:
    vals = [p.get(k) for k in ("p50", "p90", "p99")]
    return "" if all(v is None for v in vals) else "/".join("-" if v is None else f"{v * 1e3:.1f}" for v in vals)


def _num(v, fmt: str) -> str:
    return "" if v is None else format(v, fmt)


def _moved(t: dict | None) -> str:
    """Row transitions: ``kernel:n`` by the remap family, ``<why>:n`` in torch; ``-`` for none."""
    if not t or not t.get("steps"):
        return "-"
    parts = [f"kernel:{t['kernel']}"] if t.get("kernel") else []
    return ",".join(parts + [f"{k}:{n}" for k, n in sorted(t.get("torch", {}).items())])


def row(run: dict) -> dict[str, str]:
    """One finished run's figures as the table prints them."""
    m = run["metrics"]
    return {
        "load": run["load"],
        "mode": run["mode"],
        "finished": f"{m['finished']}/{m['requests']}",
        "request_throughput": _num(m["request_throughput"], ".2f"),
        "output_tokens_per_s": _num(m["output_tokens_per_s"], ".1f"),
        "ttft_ms": _ms(m["ttft_s"]),
        "tpot_ms": _ms(m["tpot_s"]),
        "itl_ms": _ms(m["itl_s"]),
        "acceptance": _num(m["acceptance"], ".2f"),
        "fast_path_share": _num(m["fast_path_share"], ".2f"),
        "fallbacks": ",".join(f"{k}:{n}" for k, n in sorted(m["fallbacks"].items())) or "-",
        "moved": _moved(m.get("transitions")),
        "preemptions": str(m["preemptions"]),
        "host_syncs_per_step": _num(m["host_syncs_per_step"], ".2f"),
        "wall_s": _num(run.get("wall_s"), ".1f"),
    }


def table(result: dict) -> str:
    """The finished runs as aligned columns with a legend, then the skipped modes and the failed runs."""
    rows = [row(r) for r in ok_runs(result)]
    out = []
    if rows:
        cells = [[r[k] for k, _ in COLUMNS] for r in rows]
        head = [h for _, h in COLUMNS]
        widths = [max(len(x) for x in col) for col in zip(head, *cells)]
        line = lambda vals: "  ".join(v.rjust(w) for v, w in zip(vals, widths))  # noqa: E731
        out += [line(head), line(["-" * w for w in widths]), *map(line, cells), LEGEND]
    out += [transition_line(r) for r in ok_runs(result) if r.get("transition_idle")]
    out += [marks_line(r) for r in ok_runs(result) if r.get("transition_idle_marks")]
    out += [f"{m}: {why}" for m, why in (result.get("skipped_modes") or {}).items()]
    out += failures(result)
    return "\n".join(out)


def marks_line(run: dict) -> str:
    """One run's device idle outside every step's and chunk's range before a step, from timing events at the
    ranges' ends (no profiler): median us (count, largest) by transition kind."""
    summary = run["transition_idle_marks"].get("summary") or {}
    parts = [f"{kind} {s['p50_us']:.1f} us (n={s['n']}, max {s['max_us']:.1f})" for kind, s in summary.items()]
    what = "; ".join(parts) or "no decode step was marked"
    return f"device idle outside the ranges, from timing events ({run['mode']} at {run['load']}, no profiler): {what}"


def transition_line(run: dict) -> str:
    """One run's device idle before its profiled decode steps, by transition kind: median us (count), and a
    transition's median less the steady steps' median."""
    summary = run["transition_idle"].get("summary") or {}
    parts = []
    for kind, s in summary.items():
        added = "" if s.get("added_us") is None else f", {s['added_us']:+.1f}"
        before = "" if s.get("before_p50_us") is None else f", {s['before_p50_us']:.1f} right before it"
        if s.get("outside_p50_us") is not None:  # without the gaps inside a prefill chunk's own work
            before += f", {s['outside_p50_us']:.1f} outside the chunks (max {s['outside_max_us']:.1f})"
        parts.append(f"{kind} {s['p50_us']:.1f} us (n={s['n']}{added}{before})")
    what = "; ".join(parts) or "no device records (the kernel trace needs CUDA)"
    line = f"device idle before a step ({run['mode']} at {run['load']}, profiled run): {what}"
    where = [
        f"{kind} " + ", ".join(f"{k} {us / 1e3:.2f} ms" for k, us in sorted(s["between_us"].items()))
        for kind, s in summary.items()
        if s.get("between_us") and kind != "steady"
    ]
    if where:  # what lies on either side of the idle: serve>prefill is a chunk launched late, and so on
        line += "\n  that idle by the records on either side (total): " + "; ".join(where)
    dt = run["transition_idle"].get("device_time")
    if dt and dt.get("window_us"):
        step, pre, win = dt["serve"], dt["prefill"], dt["window_us"]
        line += (
            f"\n  device time of that window ({win / 1e3:.1f} ms): decode steps {step['busy_us'] / win:.0%} "
            f"({step['ranges']}, median {(step['p50_us'] or 0) / 1e3:.2f} ms each), prefill chunks "
            f"{pre['busy_us'] / win:.0%} ({pre['ranges']}), idle {dt['idle_us'] / win:.0%}"
        )
    return line


def _loads(runs: list[dict]) -> list[str]:
    """The loads in sweep order: rates ascending, then all at once, then closed loops."""

    def key(r):
        if r.get("in_flight") is not None:
            return (2, r["in_flight"])
        return (1, 0) if r.get("rate") is None else (0, r["rate"])

    seen: dict[str, tuple] = {}
    for r in runs:
        seen.setdefault(r["load"], key(r))
    return sorted(seen, key=seen.get)


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def plot_latency(result: dict, path: Path) -> Path | None:
    """``latency_vs_rate.png``: TPOT p50 / p99 and TTFT p50 per load, a line per mode; None without matplotlib
    (or without a finished run)."""
    plt, runs = _pyplot(), ok_runs(result)
    if plt is None or not runs:
        return None
    loads = _loads(runs)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for mode in dict.fromkeys(r["mode"] for r in runs):
        by_load = {r["load"]: r["metrics"] for r in runs if r["mode"] == mode}
        xs = [i for i, load in enumerate(loads) if load in by_load]
        pick = lambda fig_key, q: [_or_nan(by_load[loads[i]][fig_key][q]) * 1e3 for i in xs]  # noqa: E731
        (p50,) = axes[0].plot(xs, pick("tpot_s", "p50"), marker="o", label=f"{mode} p50")
        axes[0].plot(xs, pick("tpot_s", "p99"), marker="^", ls="--", color=p50.get_color(), label=f"{mode} p99")
        axes[1].plot(xs, pick("ttft_s", "p50"), marker="o", color=p50.get_color(), label=f"{mode} p50")
    for ax, what in zip(axes, ("TPOT (ms)", "TTFT (ms)")):
        ax.set_xticks(range(len(loads)), loads)
        ax.set_xlabel("load (requests/s; inf: all at once; closed N: N in flight)")
        ax.set_ylabel(what)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{result.get('model')} / {result.get('draft')} depth {result.get('depth')}: latency against load")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _or_nan(v):
    return float("nan") if v is None else v


def timeline_load(result: dict) -> str | None:
    """The load the timeline draws: the highest request rate, else the first load that has runs."""
    runs = [r for r in ok_runs(result) if r["steps"]]
    rated = [r for r in runs if r.get("rate") is not None and r.get("in_flight") is None]
    if rated:
        return max(rated, key=lambda r: r["rate"])["load"]
    return _loads(runs)[0] if runs else None


def plot_timeline(result: dict, path: Path) -> Path | None:
    """``timeline.png``: a panel per mode at ``timeline_load``, the batch size per step over time, fast-path
    steps and fallback steps marked; None without matplotlib or without steps."""
    load = timeline_load(result)
    plt = _pyplot() if load is not None else None
    if plt is None:
        return None
    runs = [r for r in ok_runs(result) if r["load"] == load and r["steps"]]
    fig, axes = plt.subplots(len(runs), 1, figsize=(11, 2.4 * len(runs) + 0.8), sharex=True, squeeze=False)
    for ax, r in zip(axes[:, 0], runs):
        t = [s["t"] for s in r["steps"]]
        b = [s["batch"] for s in r["steps"]]
        ax.step(t, b, where="post", color="#999999", lw=1)
        fast = [(x, y) for x, y, s in zip(t, b, r["steps"]) if s["fast_path"]]
        slow = [(x, y) for x, y, s in zip(t, b, r["steps"]) if not s["fast_path"]]
        if fast:
            ax.scatter(*zip(*fast), s=14, color="#66c2a5", label="fast path", zorder=3)
        if slow:
            ax.scatter(*zip(*slow), s=22, color="#fc8d62", marker="x", label="fallback", zorder=3)
        share = r["metrics"]["fast_path_share"]
        ax.set_title(
            f"{r['mode']}" + (f": {share:.0%} of steps on the fast path" if share is not None else ""), fontsize=9
        )
        ax.set_ylabel("batch")
        ax.set_ylim(0, max(b) + 1)
        ax.yaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper right")
    axes[-1, 0].set_xlabel("time (s)")
    fig.suptitle(f"{result.get('model')}: running batch per decode step at load {load}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_partial(result: dict, out: Path) -> Path | None:
    """``serve_bench.json`` with the runs finished so far (``"partial": true``), while a sweep goes on; None
    until one finished (an earlier run's file is left as it was)."""
    if not ok_runs(result):
        return None
    out.mkdir(parents=True, exist_ok=True)
    _write_atomic(out / RESULT_FILE, json.dumps(result, indent=1) + "\n")
    return out / RESULT_FILE


def write(result: dict, out: Path) -> list[Path]:
    """``serve_bench.json`` and, where matplotlib is installed, the two pictures (a picture that cannot be drawn
    is removed, not left from an earlier run)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / RESULT_FILE]
    _write_atomic(paths[0], json.dumps(result, indent=1) + "\n")
    missing = False
    pictures = [("latency_vs_rate.png", plot_latency), ("timeline.png", plot_timeline)]
    if any(r.get("transition_idle") or r.get("transition_idle_marks") for r in ok_runs(result)):
        pictures.append(("transition_idle.png", plot_transition_idle))
    for name, draw in pictures:
        png = out / name
        try:
            drawn = draw(result, png)
        except Exception as e:  # noqa: BLE001  the results are written; a picture that fails is reported
            drawn = None
            log(f"serve-bench: could not draw {name} ({type(e).__name__}: {e})")
        if drawn is None:
            missing = missing or _pyplot() is None
            png.unlink(missing_ok=True)
        else:
            paths.append(drawn)
    if missing:
        log("serve-bench: matplotlib is not installed, so no pictures (pip install 'specgen[plot]')")
    return paths


def transition_points(gaps: list[dict], kind: str) -> tuple[list[float], list[float]]:
    """The idle before each ``kind`` step in ``gaps``: all of it, and the transition's own (``outside_us``: outside
    every step's and chunk's first-to-last extent; a file recorded before that split gives all of it)."""
    mine = [g for g in gaps if g["kind"] == kind]
    return [g["idle_us"] for g in mine], [g.get("outside_us", g["idle_us"]) for g in mine]


def plot_transition_idle(result: dict, path: Path) -> Path | None:
    """``transition_idle.png``: the device idle before each decode step, by transition kind, a column of points
    per mode (the first load with gaps); a row for the profiled run's kernel trace (``transition_idle``) and one
    for the timing-event run without a profiler (``transition_idle_marks``), each where some run has it; None
    without matplotlib or gaps."""
    from .serve_transitions import KINDS

    sources = (("transition_idle", "profiled run"), ("transition_idle_marks", "timing events, no profiler"))
    rows: list[tuple[str, dict]] = []
    for key, label in sources:
        runs: dict = {}
        for run in ok_runs(result):
            t = run.get(key)
            if t and t.get("gaps") and run["mode"] not in runs:
                runs[run["mode"]] = (run["load"], t["gaps"])
        if runs:
            rows.append((label, runs))
    plt = _pyplot()
    if plt is None or not rows:
        return None
    modes = list(dict.fromkeys(m for _, runs in rows for m in runs))
    fig, axes = plt.subplots(
        len(rows), len(modes), figsize=(4.2 * len(modes), 3.4 * len(rows) + 0.4), sharey=True, squeeze=False
    )
    for r, (label, runs) in enumerate(rows):
        for c, mode in enumerate(modes):
            ax = axes[r][c]
            if mode not in runs:
                ax.set_axis_off()
                continue
            load, gaps = runs[mode]
            kinds = [k for k in KINDS if any(g["kind"] == k for g in gaps)]
            for i, kind in enumerate(kinds):
                every, own = transition_points(gaps, kind)
                xs = [i + 0.25 * ((j * 0.618) % 1.0 - 0.5) for j in range(len(every))]
                ax.scatter(xs, every, s=10, facecolors="none", edgecolors="grey", linewidths=0.6, alpha=0.6)
                ax.hlines(statistics.median(every), i - 0.3, i + 0.3, color="grey", linestyle=":")
                ax.scatter(xs, own, s=8, alpha=0.7)
                ax.hlines(statistics.median(own), i - 0.3, i + 0.3, color="black")
            ax.axhline(10.0, color="red", linestyle="--", linewidth=0.8)
            ax.set_xticks(range(len(kinds)), [f"{k}\n({sum(g['kind'] == k for g in gaps)})" for k in kinds])
            ax.set_title(f"{mode} at {load}: {label}", fontsize=9)
            ax.set_yscale("symlog", linthresh=10.0)
        axes[r][0].set_ylabel("device idle before the step (us)")
    fig.suptitle(
        "device idle at batch transitions: outside every step's and chunk's own work (filled, black: median); "
        "all of it, with the gaps between a prefill chunk's own kernels (grey); red: 10 us",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
