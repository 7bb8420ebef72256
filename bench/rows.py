"""The rows of ``bench.json``: one run's summary, the rounds of ``--repeats`` folded to one row per mode, and
``SUBJECT``'s TPOT against every other mode."""

from __future__ import annotations

from statistics import median

from ..engine.modes import MODES
from ..engine.results import RunResult
from .profiler import KERNEL_FIELDS
from .support import quarters as _quarters

SUBJECT = "specgen"  # the mode the others are compared with


def summary(res: RunResult, bare: tuple[float, float] | None) -> dict:
    """One run's row of ``bench.json``: rates, median phases, syncs per step.

    ``bare`` is ``bench.bare.bare_spans``: the draft graph and the bare
    verify graph back to back.  A run whose mode fuses the draft into its step
    graph has no event between the two, so its split is taken at the bare
    draft's length: ``draft_us`` is the bare draft and ``verify_span_us`` the
    rest of the step's span (``draft_split: "bare draft"`` says so).
    """
    bare_draft, bare_us = bare if bare is not None else (None, None)
    t = res.timings
    per_seq_tokens = res.timed_tokens / res.batch if res.batch else 0
    out = {
        "mode": res.mode,
        "width": res.width,
        "depth": res.width - 1,
        "batch": res.batch,
        "steps": res.steps,
        "acceptance": round(res.acceptance, 4),
        "tokens_per_step": round(per_seq_tokens / res.steps, 4) if res.steps else None,
        "elapsed_ms": round(res.elapsed_s * 1e3, 3),
        "tpot_ms": round(res.elapsed_s * 1e3 / per_seq_tokens, 4) if per_seq_tokens else None,
        "tokens_per_s": round(res.timed_tokens / res.elapsed_s, 1) if res.elapsed_s else None,
        "step_us": round(res.elapsed_s * 1e6 / res.steps, 2) if res.steps else None,
        "capture_s": round(res.capture_s, 4) if res.capture_s is not None else None,
        **dict.fromkeys(KERNEL_FIELDS),  # the kernel-level pass fills these in (CUDA)
    }
    if t:
        gaps = [x.gap_us for x in t[:-1]]
        span = median(x.verify_span_us for x in t)
        draft = median(x.draft_us for x in t)
        if res.fused_draft and bare_draft is not None:
            span, draft = median(x.draft_us + x.verify_span_us for x in t) - bare_draft, bare_draft
            out["draft_split"] = "bare draft"
        syncs = [x.host_syncs for x in t if x.host_syncs is not None]
        out.update(
            {
                "draft_us": round(draft, 2),
                "verify_span_us": round(span, 2),
                "bare_verify_us": round(bare_us, 2) if bare_us is not None else None,
                "draft_to_verify_us": round(span - bare_us, 2) if bare_us is not None else None,
                "verify_to_draft_us": round(median(gaps), 2) if gaps else None,
                "host_syncs_per_step": round(sum(syncs) / len(syncs), 3) if syncs else None,
                "step_us_by_quarter": _quarters(t),
            }
        )
    if res.host_turnaround_us:
        out["host_turnaround_us"] = round(median(res.host_turnaround_us), 2)
    if res.lagged_event_waits:
        out["lagged_event_waits_per_step"] = round(res.lagged_event_waits / max(res.steps, 1), 3)
    if res.runtime_stats is not None:
        out["runtime_stats"] = res.runtime_stats
    return out


def fold_rounds(rows: list[dict], modes: tuple[str, ...]) -> list[dict]:
    """One row per mode from the rounds of one depth and batch (rows carrying ``round`` and ``position``): the
    run of median TPOT (the lower median of an even count; a failed run only when none finished), with every
    round's TPOT, step and position beside it in ``rounds`` and their spread ``tpot_spread`` ((max - min) /
    median)."""
    out = []
    for mode in modes:
        mine = [r for r in rows if r["mode"] == mode]
        if not mine:
            continue
        timed = sorted((r for r in mine if "error" not in r and r.get("tpot_ms")), key=lambda r: r["tpot_ms"])
        pick = dict(timed[(len(timed) - 1) // 2] if timed else mine[0])
        pick["rounds"] = [
            {k: r[k] for k in ("round", "position", "tpot_ms", "step_us", "error") if k in r} for r in mine
        ]
        if timed:
            pick["tpot_spread"] = round((timed[-1]["tpot_ms"] - timed[0]["tpot_ms"]) / pick["tpot_ms"], 4)
        out.append(pick)
    return out


def ratios(runs: list[dict]) -> list[dict]:
    """``SUBJECT``'s TPOT against every other mode, per (depth, batch) measured in the same run."""
    out = []
    by = {}
    for r in runs:
        if "error" not in r:
            by.setdefault((r["depth"], r["batch"]), {})[r["mode"]] = r
    for (depth, batch), modes in sorted(by.items()):
        s = modes.get(SUBJECT)
        if not s or not s.get("tpot_ms"):
            continue
        row = {"depth": depth, "batch": batch}
        for other in MODES:
            o = modes.get(other)
            if other != SUBJECT and o and o.get("tpot_ms"):
                row[f"tpot_vs_{other}"] = round(s["tpot_ms"] / o["tpot_ms"] - 1.0, 4)
        out.append(row)
    return out
