"""The markdown of ``specgen plan --compare``: the cells, the rows and what the model is known to miss."""

from __future__ import annotations

__all__ = [
    "WHY",
    "WHY_HOST_CLOCKED",
    "WHY_ONE_STREAM",
    "WHY_TURNAROUND_CLOCKED",
    "cells_markdown",
    "markdown",
    "unprofiled_markdown",
    "why_markdown",
]

MODES = ("baseline", "compile", "inductor", "specgen")
# what the model is known to miss, per (mode, figure); the markdown lists it for the cells that miss
WHY = {
    ("baseline", "draft_to_verify"): "host-serial: the kernel-level bubble comes from profiled steps, where the "
    "profiler inflates every host torch call; the model's host work is the marked family ranges "
    "(host_family) only, and the host's work outside them is in no calibrated figure",
    ("baseline", "verify_to_draft"): "as draft->verify; the host's acceptance is charged (host_acceptance, "
    "from host_family.greedy_prefix_verify), but the engine's read-back itself (a pageable .cpu() copy and its "
    "allocation), the copies into the host buffers and the host tail's clones are in no calibrated figure",
    ("baseline", "tpot"): "TPOT is unprofiled, the host_family figures it is composed from are profiled "
    "(inflated), and they differ from batch to batch more than the batch explains",
    ("compile", "draft_to_verify"): "the head runs as torch.compile'd kernels: with a compile trace beside "
    "bench.json the model counts them (graph_head) and prices each at the median in-graph kernel and gap, "
    "without one it prices the plan's launches, fewer than ran",
    ("compile", "verify_to_draft"): "after the read-back the host does its own work before it launches the "
    "next draft; without the host clock's boundary.compile.host_turnaround the model has that turnaround only as "
    "the profiled steps ran it (read_back), from a calibration or a compile run's trace",
    ("compile", "tpot"): "TPOT is unprofiled, while the verify->draft it is composed from prices the read-back's "
    "turnaround (read_back) as the profiled steps ran it, where CUPTI slows the host's calls; the timed steps' "
    "event-level verify->draft is shorter, so the prediction runs high",
    ("inductor", "draft_to_verify"): "the head families run as Inductor (Triton) kernels, more launches than "
    "the plan's one composite; the draft's hand-over (draft_handover) is added, those kernels' own "
    "time is priced as the composite",
    ("inductor", "verify_to_draft"): "the tail families run as several Inductor (Triton) kernels in place of "
    "the one composite launch the plan prices; without an inductor trace (graph_tail) the planned tail and "
    "specgen's out-of-plan figures stand for them",
    ("inductor", "tpot"): "follows the bubbles' misses",
    ("specgen", "draft_to_verify"): "the head composite is priced by the median in-graph kernel and the "
    "draft's hand-over to the verify by its median (draft_handover)",
    ("specgen", "verify_to_draft"): "the modelled graph switch is the short case; in steps where the next "
    "graph's draft waits behind memcpy nodes (boundary.specgen.graph_switch_behind_copies, measured, not "
    "loaded) or its first kernel is launched behind the side stream's, the gap is longer",
    ("specgen", "tpot"): "follows the bubbles' misses",
}
# a run with its step graphs on one stream (bench.json ``side_streams: false``, ``--no-side-streams``): the plan still
# prices the hoisted head beside the draft and no device guard, where the step runs the head before the draft and the
# guard's checks before the forward
WHY_ONE_STREAM = {
    ("specgen", "draft_to_verify"): "one stream (side_streams false): the device guard's check kernel runs in line "
    "between the draft (and the token update) and the forward; the plan has no guard",
    ("specgen", "verify_to_draft"): "one stream (side_streams false): the next step's hoisted head runs in line "
    "before its draft; the plan prices it beside the draft",
}

# a calibration whose host-serial families the host clock timed (unprofiled; bench/host_clock.py)
WHY_HOST_CLOCKED = {
    ("baseline", "draft_to_verify"): "host-serial: the kernel-level bubble comes from profiled steps, where the "
    "profiler inflates every host torch call, while the calibrated host work (host_family, issue.*) is unprofiled: "
    "the model predicts the unprofiled bubble",
    ("baseline", "tpot"): "the host work outside the marked families (the syncs' wake-up, the host buffers' "
    "copies and stacking) is priced from the profile or not at all",
    ("baseline", "verify_to_draft"): "host-serial: the kernel-level bubble is the profiled steps', while the model "
    "predicts the unprofiled one (the host-bound table below), and even there the read-back itself (a pageable "
    ".cpu() copy and its allocation), the copies into the host buffers and the host tail's clones are in no "
    "calibrated figure",
}


# a calibration whose compile turnaround after the read-back the host clock timed (boundary.compile.host_turnaround)
WHY_TURNAROUND_CLOCKED = {
    ("compile", "verify_to_draft"): "host-bound: the kernel-level bubble comes from profiled steps, where CUPTI "
    "slows the host's turnaround after the read-back, while the model's turnaround is the host clock's "
    "(host_turnaround, unprofiled): it predicts the unprofiled bubble (the host-bound table below)",
    ("compile", "tpot"): "follows the bubbles' misses",
}


def _signed(v, unit: str, rel) -> str:
    if v is None:
        return "n/a"
    pct = "" if rel is None else f" ({rel * 100:+.0f}%)"
    return f"{v:+g} {unit}{pct}"


def cells_markdown(cells: list[dict], on_cpu: bool = False) -> str:
    """The cells as a markdown table: each figure predicted / measured and the error (``miss``: outside the goal)."""
    head = (
        "| mode | depth | B | costs | d->v predicted (us) | d->v measured, kernels (us) | d->v error | "
        "v->d predicted (us) | v->d measured, kernels (us) | v->d error | TPOT predicted (ms) | "
        "TPOT measured (ms) | TPOT error |"
    )
    out = [head, "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        parts = [c["mode"], str(c["depth"]), str(c["batch"]), c["costs"]]
        for name, unit in (("draft_to_verify", "us"), ("verify_to_draft", "us"), ("tpot", "ms")):
            f = c[name]
            mark = {True: "", False: " miss", None: ""}[f["within_goal"]]
            parts += [
                _cell(f[f"predicted_{unit}"], "n/a"),
                _cell(f[f"measured_{unit}"], "n/a (CPU)" if on_cpu and unit == "us" else "needs a trace"),
                _signed(f[f"error_{unit}"], unit, f["error_rel"]) + mark,
            ]
        out.append("| " + " | ".join(parts) + " |")
    return "\n".join(out)


def unprofiled_markdown(cells: list[dict]) -> str:
    """The host-bound bubbles (a boundary graph that waits on the host) against the timed steps' event-level
    figure, unprofiled, beside the profiled kernel-level one; with the count within the goal."""
    out = [
        "Host-bound bubbles against the unprofiled measurement (the timed steps' events; the kernel-level figure "
        "is from profiled steps, where CUPTI slows the host calls these bubbles are made of):",
        "",
        "| mode | depth | B | bubble | predicted (us) | measured, events, unprofiled (us) | error | "
        "measured, kernels, profiled (us) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    names, n, ok = {"draft_to_verify": "d->v", "verify_to_draft": "v->d"}, 0, 0
    for c in cells:
        for part, name in names.items():
            u = c[part].get("unprofiled")
            if u is None:
                continue
            mark = {True: "", False: " miss", None: ""}[u["within_goal"]]
            n, ok = n + (u["within_goal"] is not None), ok + bool(u["within_goal"])
            out.append(
                f"| {c['mode']} | {c['depth']} | {c['batch']} | {name} | {_cell(u['predicted_us'], 'n/a')} | "
                f"{_cell(u['measured_us'], 'n/a')} | {_signed(u['error_us'], 'us', u['error_rel'])}{mark} | "
                f"{_cell(c[part]['measured_us'], 'needs a trace')} |"
            )
    return "\n".join(out + ["", f"within the goal against the unprofiled figure: {ok}/{n}"])


def _cell(v, missing: str) -> str:
    return missing if v is None else f"{v:g}"


def why_markdown(cells: list[dict], one_stream: bool = False, costs: dict | None = None) -> str:
    """The cells outside the goal, per mode and figure, with the known reason (``WHY``; ``WHY_ONE_STREAM`` for a
    run on one stream, ``WHY_HOST_CLOCKED`` where ``costs`` took the host-serial families from the host clock,
    ``WHY_TURNAROUND_CLOCKED`` where it took compile's turnaround after the read-back from it); empty if none."""
    why = {**WHY, **WHY_ONE_STREAM} if one_stream else dict(WHY)
    method = (costs or {}).get("method", {})
    if method.get("host_family.spec_verify_head_update") == "host_clock":
        why |= WHY_HOST_CLOCKED
    if method.get("boundary.compile.host_turnaround") == "host_clock":
        why |= WHY_TURNAROUND_CLOCKED
    misses: dict[tuple[str, str], list[str]] = {}
    for c in cells:
        for part in ("draft_to_verify", "verify_to_draft", "tpot"):
            if c[part]["within_goal"] is False:
                misses.setdefault((c["mode"], part), []).append(f"d{c['depth']} B={c['batch']}")
    names = {"draft_to_verify": "d->v", "verify_to_draft": "v->d", "tpot": "TPOT"}
    order = sorted(misses, key=lambda k: (MODES.index(k[0]), list(names).index(k[1])))
    out = [
        f"- {mode} {names[part]} ({', '.join(misses[mode, part])}): {why.get((mode, part), 'not known')}"
        for mode, part in order
    ]
    return ("Outside the goal, and why:\n\n" + "\n".join(out)) if out else ""


def markdown(rows: list[dict], calibrated: bool, on_cpu: bool = False) -> str:
    """The rows as a markdown table; empty cells say what would fill them (the CPU has no kernel figures)."""
    no_kernels = "n/a (CPU)" if on_cpu else "needs a trace"
    head = (
        "| boundary | mode | depth | B | predicted, default costs (us) | predicted, calibrated (us) | "
        "out of plan (us) | predicted (us) | measured, events (us) | measured, kernels (us) |"
    )
    out = [head, "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        extra = r.get("out_of_plan_us") or {}
        terms = ", ".join(f"{t} {v:g}" for t, v in extra.items()) + (f" ({r['out_of_plan_from']})" if extra else "")
        out.append(
            f"| {r['boundary']} | {r['mode']} | {r['depth']} | {r['batch']} | "
            f"{_cell(r['predicted_default_us'], '')} | "
            f"{_cell(r['predicted_calibrated_us'], 'needs a trace' if not calibrated else 'n/a')} | "
            f"{terms or '-'} | {_cell(r.get('predicted_us'), 'n/a')} | "
            f"{_cell(r['measured_events_us'], 'n/a')} | {_cell(r['measured_kernel_us'], no_kernels)} |"
        )
    return "\n".join(out)
