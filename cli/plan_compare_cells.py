"""``specgen plan --compare``'s cells: per (mode, depth, batch) the predicted bubbles and TPOT against the measured.

Each cell holds the predicted bubbles (calibrated where ``--costs`` was given)
against the kernel-level measured ones, and a predicted TPOT against the
measured one, each with its error (``predicted - measured``, in the unit and
as a fraction of the measurement) and whether it lies within issue 25's goal
(``GOAL``: a bubble within max(25%, 3 us), TPOT within 10%).  The predicted
TPOT composes a step the way the bench measures its parts: the run's draft
graph (``draft_us``) and bare verify graph (``bare_verify_us``) plus the two
predicted bubbles, over the run's ``tokens_per_step``; so only the model's
bubbles separate it from the measured TPOT.

A host-bound bubble (the mode's boundary graph waits on the host: baseline's
both, compile's verify->draft; a row's ``host_synced``) is judged a second
time, against the timed steps' event-level figure (``unprofiled``): the
kernel-level one comes from profiled steps, where CUPTI slows every host call
the bubble is made of, while TPOT and the calibrated host costs are unprofiled.
"""

from __future__ import annotations

__all__ = ["BUBBLES", "GOAL", "MEASURED", "cells", "predicted_tpot_ms", "summary"]

# the bench.json fields of a boundary's measured bubble: the event-based figure and the kernel-level one
MEASURED = {
    "draft-to-verify": ("draft_to_verify_us", "kernel_draft_to_verify_us"),
    "verify-to-draft": ("verify_to_draft_us", "kernel_verify_to_draft_us"),
}

BUBBLES = {"draft_to_verify": "draft-to-verify", "verify_to_draft": "verify-to-draft"}  # a cell's part: boundary
GOAL = {"bubble_rel": 0.25, "bubble_us": 3.0, "tpot_rel": 0.10}  # issue 25: max(25%, 3 us); 10%


def _error(predicted, measured, unit: str, tolerance) -> dict:
    """``predicted`` against ``measured``: the difference, its fraction of the measurement, within the goal."""
    out = {f"predicted_{unit}": predicted, f"measured_{unit}": measured}
    if predicted is None or measured is None:
        return dict(out, **{f"error_{unit}": None, "error_rel": None, "within_goal": None})
    err = predicted - measured
    return dict(
        out,
        **{
            f"error_{unit}": round(err, 4 if unit == "ms" else 2),
            "error_rel": round(err / measured, 4) if measured else None,
            "within_goal": abs(err) <= tolerance(measured),
        },
    )


def _bubble(predicted, measured) -> dict:
    return _error(predicted, measured, "us", lambda m: max(GOAL["bubble_rel"] * abs(m), GOAL["bubble_us"]))


def predicted_tpot_ms(run: dict, d2v_us: float | None, v2d_us: float | None) -> float | None:
    """A step as the bench measures its parts: the draft graph, the bare verify graph and the two predicted
    bubbles; over the run's tokens per step (``tpot_ms = step_us / tokens_per_step``)."""
    parts = (run.get("draft_us"), run.get("bare_verify_us"), d2v_us, v2d_us)
    tps = run.get("tokens_per_step")
    if any(p is None for p in parts) or not tps:
        return None
    return round(sum(parts) / tps / 1e3, 4)


def cells(result: dict, rows: list[dict]) -> list[dict]:
    """Per (mode, depth, batch): the predicted and the measured kernel-level draft->verify and verify->draft
    bubbles and TPOT, with the errors; predictions from the calibrated costs where ``rows`` have them."""
    runs = {(r["mode"], r["depth"], r["batch"]): r for r in result["runs"] if "error" not in r}
    pred: dict[tuple, dict] = {}
    for r in rows:
        p = r["predicted_calibrated_us"] if r["predicted_calibrated_us"] is not None else r["predicted_default_us"]
        p = r.get("predicted_us", p)  # with the out-of-plan figures
        pred.setdefault((r["mode"], r["depth"], r["batch"]), {})[r["boundary"]] = p
        if r.get("predicted_events_us") is not None:  # as the timed steps' events split a step
            pred[r["mode"], r["depth"], r["batch"]].setdefault("events", {})[r["boundary"]] = r["predicted_events_us"]
        pred[r["mode"], r["depth"], r["batch"]]["calibrated"] = r["predicted_calibrated_us"] is not None
        if r.get("host_synced"):
            pred[r["mode"], r["depth"], r["batch"]].setdefault("host_synced", set()).add(r["boundary"])
    out = []
    for key, p in pred.items():
        run = runs[key]
        ev = {b: p.get("events", {}).get(b, p.get(b)) for b in BUBBLES.values()}  # the bench's split of a step
        tpot = _error(
            predicted_tpot_ms(run, ev["draft-to-verify"], ev["verify-to-draft"]),
            run.get("tpot_ms"),
            "ms",
            lambda m: GOAL["tpot_rel"] * m,
        )
        cell = {
            "mode": key[0],
            "depth": key[1],
            "batch": key[2],
            "costs": "calibrated" if p["calibrated"] else "default",
        }
        for part, boundary in BUBBLES.items():
            events, kernels = MEASURED[boundary]
            cell[part] = _bubble(p.get(boundary), run.get(kernels))
            if boundary in p.get("host_synced", ()):  # also against the unprofiled event-level figure
                cell[part]["unprofiled"] = _bubble(ev[boundary], run.get(events))
        out.append(cell | {"tpot": tpot})
    return out


def summary(cells: list[dict]) -> dict:
    """How many figures were measured and how many of those the prediction meets the goal on; the host-bound
    bubbles against their unprofiled figures apart (``host_bound_unprofiled``)."""
    out = {}
    for part in ("draft_to_verify", "verify_to_draft", "tpot"):
        judged = [c[part]["within_goal"] for c in cells if c[part]["within_goal"] is not None]
        out[part] = {"measured": len(judged), "within_goal": sum(judged)}
    unprofiled = [c[p]["unprofiled"]["within_goal"] for c in cells for p in BUBBLES if "unprofiled" in c[p]]
    judged = [w for w in unprofiled if w is not None]
    out["host_bound_unprofiled"] = {"measured": len(judged), "within_goal": sum(judged)}
    return out
