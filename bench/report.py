"""The bench's output: the console table with what its columns mean, notes, the timeline picture, the files."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .rows import SUBJECT
from .support import log

__all__ = [
    "LEGEND",
    "PHASES",
    "ResultError",
    "check",
    "failures",
    "figure",
    "notes",
    "ok_runs",
    "plot",
    "table",
    "write",
]

PHASES = (
    ("draft", "draft_us", "#8da0cb"),
    ("draft->verify boundary", "draft_to_verify_us", "#fc8d62"),
    ("verify graph", "bare_verify_us", "#66c2a5"),
    ("verify->draft gap", "verify_to_draft_us", "#e78ac3"),
)
LEGEND = (
    "columns: TPOT = time per output token; d->v = the draft->verify boundary (verify span minus the bare "
    "verify graph); v->d = the verify->next-draft gap; verify = the bare verify graph; draft = the draft "
    "graph; k d->v / k v->d = the same gaps between kernels on the device (profiled steps); bare k d->v = "
    "k d->v of the draft graph followed by the bare verify graph (no boundary work); head = the "
    "device time of the boundary work before the forward; capture = capturing the run's graphs "
    "(medians per step); for a block draft, proj = the span of its context projection after the verification "
    "and k v->d out = k v->d outside it; for a sampled run, vocab = the vocabulary pass's device time"
)
# columns only where some run measured them: a block draft's own work after the verification, a sampled run's
# vocabulary pass
OWN_WORK_COLUMNS = ("projection_us", "kernel_post_verify_us", "vocab_kernel_us")
LOW_ACCEPTANCE = 0.1
COSTS_FILE = "costs.json"  # the cost model's calibration, beside bench.json


class ResultError(ValueError):
    """A bench result (``bench.json``) without the shape ``specgen bench`` writes."""


def check(result) -> dict:
    """``result`` if it has the shape of a bench result; ``ResultError`` naming what is wrong otherwise."""
    if not isinstance(result, dict):
        raise ResultError(f"a bench result is a JSON object, not a {type(result).__name__}")
    runs = result.get("runs")
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        raise ResultError("a bench result has a 'runs' list of objects")
    for r in runs:
        if not {"mode", "depth", "batch"} <= set(r):
            raise ResultError(f"a run lacks 'mode', 'depth' or 'batch': {json.dumps(r)[:80]}")
    return result


def ok_runs(result: dict) -> list[dict]:
    """The runs that finished (no ``error``) with a time per token."""
    return [r for r in result["runs"] if "error" not in r and r.get("tpot_ms") is not None]


def failures(result: dict) -> list[str]:
    """What failed in a bench result, one line each: a sweep the device stopped, a mode that raised, a run
    whose tokens differ from plain greedy decoding (``--check``)."""
    out = [f"the sweep stopped early: {result['aborted']}"] if result.get("aborted") else []
    for r in result["runs"]:
        where = f"at depth {r['depth']} B={r['batch']}"
        if "error" in r:
            out.append(f"mode {r['mode']} failed {where}: {r['error']}")
        elif r.get("equals_greedy") is False:
            out.append(f"mode {r['mode']} {where}: its tokens differ from plain greedy decoding (--check)")
    return out


def table(result: dict) -> str:
    """The runs as aligned columns with a legend, then the TPOT ratios, skipped modes and failures."""
    cols = [
        ("depth", "depth"),
        ("batch", "B"),
        ("mode", "mode"),
        ("tpot_ms", "TPOT ms"),
        ("tokens_per_s", "tok/s"),
        ("draft_to_verify_us", "d->v us"),
        ("verify_to_draft_us", "v->d us"),
        ("kernel_draft_to_verify_us", "k d->v us"),
        ("bare_kernel_draft_to_verify_us", "bare k d->v"),
        ("kernel_verify_to_draft_us", "k v->d us"),
        ("projection_us", "proj us"),
        ("kernel_post_verify_us", "k v->d out us"),
        ("head_us", "head us"),
        ("vocab_kernel_us", "vocab us"),
        ("bare_verify_us", "verify us"),
        ("draft_us", "draft us"),
        ("host_syncs_per_step", "syncs/step"),
        ("acceptance", "accept"),
        ("capture_s", "capture s"),
    ]
    ok = ok_runs(result)
    cols = [(k, h) for k, h in cols if k not in OWN_WORK_COLUMNS or any(r.get(k) is not None for r in ok)]
    rows = [[("" if r.get(k) is None else str(r.get(k))) for k, _ in cols] for r in ok]
    head = [h for _, h in cols]
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    line = lambda vals: "  ".join(v.rjust(w) for v, w in zip(vals, widths))  # noqa: E731
    out = [line(head), line(["-" * w for w in widths])] + [line(r) for r in rows] if ok else []
    if ok:
        out.append(LEGEND)
    noisy = _noisy(ok)
    for r in result.get("ratios") or []:
        parts = [
            f"{k[8:]} not significant (noisy timing, see the note)"
            if (r["depth"], r["batch"], k[8:]) in noisy
            else f"{k[8:]} {v * 100:+.1f}%"
            for k, v in r.items()
            if k.startswith("tpot_vs_")
        ]
        if parts:
            out.append(f"depth {r['depth']} B={r['batch']}: {SUBJECT} TPOT vs " + ", ".join(parts))
    for m, why in (result.get("skipped_modes") or {}).items():
        out.append(f"{m}: {why}")
    for r in result["runs"]:
        if "error" in r:
            out.append(f"depth {r['depth']} B={r['batch']} {r['mode']}: failed: {r['error']}")
    return "\n".join(out + [f"note: {n}" for n in notes(result)])


def notes(result: dict) -> list[str]:
    """What a reader of the table should know: empty columns, low acceptance, noisy timings."""
    ok = ok_runs(result)
    out = []
    if ok and all(r.get("host_syncs_per_step") is None for r in ok):
        out.append("syncs/step is counted with torch.cuda's sync debug mode, so it stays empty on the CPU")
    if ok and all(r.get("kernel_draft_to_verify_us") is None for r in ok):
        out.append(
            "k d->v, k v->d and head come from a torch.profiler trace of the device's kernels (CUDA, "
            "--profile-steps > 0); on the CPU there are no kernels, so they stay empty"
        )
    windows = [r for r in ok if r.get("kernel_attribution") == "time-window"]
    if windows:
        out.append(
            f"{len(windows)} run(s) had device records without launch correlation ids; their kernel "
            "figures come from launch time windows, exact only where the host waits for the device"
        )
    failed = [r for r in ok if r.get("kernel_profile_error")]
    if failed:
        out.append(
            f"the kernel-level profile failed for {len(failed)} run(s), e.g. {failed[0]['mode']}: "
            f"{failed[0]['kernel_profile_error']}"
        )
    accept = sorted(r.get("acceptance") or 0.0 for r in ok)
    if accept and result.get("acceptance_p") is None and accept[len(accept) // 2] < LOW_ACCEPTANCE:
        kind = result.get("draft") or "mtp"
        draft = "MTP head" if kind == "mtp" else f"{kind} draft"
        draft = (
            draft if result.get("draft_weights") or result.get("draft_from_checkpoint") else f"random-weight {draft}"
        )
        out.append(
            f"acceptance is {accept[len(accept) // 2]}: the {draft} seldom agrees with the "
            f"target, so a step commits about one token; --acceptance 0.7 measures at a realistic rate"
        )
    fused = sorted({r["mode"] for r in ok if r.get("draft_split")})
    if fused:
        out.append(
            f"{', '.join(fused)} run(s) the draft inside the step graph: no event separates draft and verify, "
            "so their draft column is the bare draft graph and d->v is the step's span minus the bare draft "
            "and the bare verify graph"
        )
    out += _noise(ok)
    out += _rounds(ok)
    return out


def _rounds(ok: list[dict]) -> list[str]:
    """With --repeats: what each row is, and per (depth, batch) ``SUBJECT``'s TPOT against each other mode
    round by round (the runs of one round ran next to each other)."""
    rounds = [r for r in ok if r.get("rounds")]
    if not rounds:
        return []
    n = max(len(r["rounds"]) for r in rounds)
    wide = max(rounds, key=lambda r: r.get("tpot_spread") or 0.0)
    out = [
        f"each row is the run of median TPOT among {n} timed runs of its mode (--repeats), the modes' order "
        f"rotated each round; the widest spread of one mode's runs is {(wide.get('tpot_spread') or 0) * 100:.1f}% "
        f"({wide['mode']}, depth {wide['depth']} B={wide['batch']})"
    ]
    by = {}
    for r in rounds:
        by.setdefault((r["depth"], r["batch"]), {})[r["mode"]] = {
            x["round"]: x["tpot_ms"] for x in r["rounds"] if x.get("tpot_ms") and "error" not in x
        }
    for (depth, batch), modes in sorted(by.items()):
        s = modes.get(SUBJECT) or {}
        for other, o in sorted(modes.items()):
            per = [s[k] / o[k] - 1.0 for k in sorted(s.keys() & o.keys())] if other != SUBJECT else []
            if len(per) > 1:
                out.append(
                    f"depth {depth} B={batch}: {SUBJECT} vs {other} round by round "
                    + ", ".join(f"{x * 100:+.1f}%" for x in per)
                )
    return out


def _noisy(ok: list[dict]) -> dict[tuple[int, int, str], tuple[float, float, float]]:
    """``(depth, batch, other mode)`` -> (lowest, highest, overall) ``SUBJECT``-vs-other difference, for each
    comparison whose quarter-by-quarter difference spreads wider than the difference itself."""
    by = {}
    for r in ok:
        by.setdefault((r["depth"], r["batch"]), {})[r["mode"]] = r
    out = {}
    for (depth, batch), modes in sorted(by.items()):
        s = modes.get(SUBJECT)
        for other, o in sorted(modes.items()):
            if other == SUBJECT or s is None:
                continue
            qs, qo = s.get("step_us_by_quarter") or [], o.get("step_us_by_quarter") or []
            if len(qs) < 2 or len(qs) != len(qo) or not all(qo) or not o.get("tpot_ms"):
                continue
            per = [a / b - 1.0 for a, b in zip(qs, qo)]
            overall = s["tpot_ms"] / o["tpot_ms"] - 1.0
            if max(per) - min(per) > abs(overall):
                out[(depth, batch, other)] = (min(per), max(per), overall)
    return out


def _noise(ok: list[dict]) -> list[str]:
    """A warning per (depth, batch) whose quarter-by-quarter difference spreads wider than the difference."""
    return [
        f"noisy timing at depth {depth} B={batch}: {SUBJECT} vs {other} ranges from "
        f"{lo * 100:+.1f}% to {hi * 100:+.1f}% over the quarters of the timed steps, "
        f"wider than the {overall * 100:+.1f}% measured; run more --steps on a quiet machine "
        f"before trusting the difference"
        for (depth, batch, other), (lo, hi, overall) in _noisy(ok).items()
    ]


def plot(result: dict, path: Path) -> Path | None:
    """``timeline.png``: one step per mode (one panel per depth x batch); None when matplotlib is absent."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig = figure(result)
    try:
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)
    return path


def figure(result: dict):
    """The timeline as a matplotlib figure: title on top, the panels, the legend below them."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    groups = {}
    for r in ok_runs(result):
        groups.setdefault((r["depth"], r["batch"]), []).append(r)
    keys = sorted(groups)
    if not keys:
        raise ResultError("no finished run to draw")
    heights = [0.6 + 0.38 * len(groups[k]) for k in keys]
    fig, axes = plt.subplots(
        len(keys),
        1,
        figsize=(10, 1.1 + sum(heights)),
        squeeze=False,
        layout="constrained",
        gridspec_kw={"height_ratios": heights},
    )
    for ax, key in zip(axes[:, 0], keys):
        rows = groups[key]
        for y, r in enumerate(rows):
            x = 0.0
            for _label, field, color in PHASES:
                w = r.get(field)
                if w is None:
                    continue
                w = max(float(w), 0.0)
                ax.barh(y, w, left=x, color=color, edgecolor="black", linewidth=0.3, height=0.7)
                x += w
            syncs = r.get("host_syncs_per_step")
            note = f"  {r['tpot_ms']} ms/token" + (f", {syncs:g} host syncs/step" if syncs is not None else "")
            ax.text(x, y, note, va="center", fontsize=7)
        ax.set_yticks(range(len(rows)), [r["mode"] for r in rows])
        ax.set_ylim(-0.6, len(rows) - 0.4)
        ax.set_title(f"depth {key[0]}, batch {key[1]}: one decode step", fontsize=9)
        ax.margins(x=0.3)
    axes[-1, 0].set_xlabel("microseconds (median step)")
    fig.legend(
        handles=[Patch(facecolor=c, edgecolor="black", linewidth=0.3, label=label) for label, _, c in PHASES],
        loc="outside lower center",
        ncol=4,
        fontsize=7,
        frameon=False,
    )
    env = result.get("environment") or {}
    fig.suptitle(f"specgen bench: {result.get('model', '?')} on {env.get('device', '?')}", fontsize=10)
    return fig


# the kernel-level pictures: (file, the run field it is drawn from, its drawing function in kernel_plot)
KERNEL_PICTURES = (
    ("kernel_timeline.png", "kernel_trace", "plot_kernels"),
    ("kernel_breakdown.png", "kernel_breakdown", "plot_breakdown"),
)


def _plot_kernel_picture(result: dict, out: Path, name: str, field: str, draw: str) -> Path | None:
    """``name`` from the runs' ``field`` (their saved traces, their breakdowns), when a run has it (a failure is
    reported, not raised)."""
    if not any(r.get(field) for r in result["runs"]):
        return None
    from . import kernel_plot

    try:
        return getattr(kernel_plot, draw)(result, out)
    except Exception as e:  # noqa: BLE001  the results are written; a picture that fails is reported
        log(f"bench: could not draw {name} ({type(e).__name__}: {e})")
        return None


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def write(result: dict, out: Path) -> list[Path]:
    """``bench.json``, ``costs.json`` (with a calibration) and, where matplotlib is installed, ``timeline.png``,
    and from a kernel-level pass ``kernel_timeline.png`` and ``kernel_breakdown.png``.

    A result without a finished run is a ``ResultError`` and writes nothing; a
    picture that cannot be drawn for this result is removed rather than left stale.
    """
    if not ok_runs(result):
        raise ResultError("no run finished")
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "bench.json"]
    result = dict(result)
    calibration = result.pop("calibration", None)
    costs = out / COSTS_FILE
    if calibration is not None:  # the profiled steps' cost-model figures: specgen plan --costs reads them
        result["costs"] = COSTS_FILE
        _write_atomic(costs, json.dumps(calibration, indent=1) + "\n")
    else:
        costs.unlink(missing_ok=True)  # an earlier run's calibration would pass for this one
    _write_atomic(paths[0], json.dumps(dict(result, notes=notes(result)), indent=1) + "\n")
    if calibration is not None:
        paths.append(costs)
    for name, field, draw in KERNEL_PICTURES:
        picture = _plot_kernel_picture(result, out, name, field, draw)
        if picture is None:
            (out / name).unlink(missing_ok=True)  # a picture of an earlier run would pass for this one
        else:
            paths.append(picture)
    png = out / "timeline.png"
    try:
        drawn = plot(result, png)
    except Exception as e:  # noqa: BLE001  the results are written; a picture that fails is reported
        drawn = None
        log(
            f"bench: could not draw timeline.png ({type(e).__name__}: {e}); retry with specgen bench --replot "
            f"{paths[0]}"
        )
    else:
        if drawn is None:
            log(
                "bench: matplotlib is not installed, so no timeline.png (pip install 'specgen[plot]', then "
                f"specgen bench --replot {paths[0]})"
            )
    if drawn is None:
        png.unlink(missing_ok=True)  # a picture of an earlier run would pass for this one
    else:
        paths.append(drawn)
    return paths
