"""``specgen plan --compare BENCH_JSON``: the cost model's predicted bubbles next to a bench's measured ones.

For every finished run of the bench (mode, depth, batch) and both boundaries
the boundary graph is built at the run's shape (width, batch, the bench's
block layout; the draft step and the forward take the run's measured
``draft_us`` / depth and ``bare_verify_us``), put through the pipeline that
describes the mode (``MODE_PIPELINES``), and its bubble predicted with the
default costs and, given a calibration (``--costs``, e.g. the ``costs.json``
``specgen bench`` writes beside bench.json), with the calibrated costs of the
run's batch (``by_batch``) or the pooled ones.  Measured: the event-based
figure (``draft_to_verify_us`` / ``verify_to_draft_us``) and the kernel-level
one (``kernel_draft_to_verify_us`` / ``kernel_verify_to_draft_us``, from a
profiled run).

Besides those rows (one per boundary), ``cells`` holds one entry per (mode,
depth, batch): the predicted bubbles and TPOT against the measured ones, each
with its error and whether it lies within issue 25's goal (``GOAL``; the
arithmetic is ``plan_compare_cells``').

How each mode is modelled:

* ``baseline``: the boundary graph before passes (host-serial: syncs, host
  updates, copies).
* ``specgen``: the full default pipeline, as the engine's plans use it.
* ``inductor``: the same pipeline; it runs specgen's plan and captured
  pipeline with the families as Inductor kernels, so only the in-graph kernel
  costs differ (which one calibration for all modes does not separate).
* ``compile``: the updates captured with the forward without one composite
  launch (``sync-to-event,hoist,fuse,capture``), and on verify-to-draft the
  host synchronizes on the step's result before it issues the next draft (a
  read-back each step, no lag).

What the runtime does at a boundary outside the plan (``OUT_OF_PLAN`` at
verify->draft, ``OUT_OF_PLAN_D2V`` at draft->verify; the cost file's
``boundary`` figures, ``bench/boundary_terms.py``) is added to the planned
bubble: for ``specgen`` and ``inductor`` the casting copy of the forward's
argmax (``cast``), the host-field pack inside the step graph (``graph_pack``),
the stream wait and pack queued after the replay (``after_replay``, where the
pack is not in the graph) and the switch to the next step's graph up to its
first draft record (``graph_switch``); for ``inductor`` its tail as its own
kernels ran (``graph_tail``, from its own trace only) stands in for the planned
tail and the casting copy; for ``compile`` the planned bubble up to the
read-back's synchronization plus the host's turnaround after it: the host
clock's (``host_turnaround``), the draft's launch call (``draft_launch``,
``issue.graph_replay``) and its device latency (``read_back_launch``) where the
calibration has the first, else the profiled steps' (``read_back``); for
``baseline`` the host clock's turnaround and the acceptance its host runs
(``host_acceptance``, in place of the graph's device kernels of that family). At
draft->verify ``compile``'s head, whose torch.compile'd kernels the plan does
not describe, is priced as the launches its own trace counts (``HEAD_AS_RAN``,
``graph_head``). A host-bound row also carries ``predicted_events_us``, its
prediction as the bench's events split a step (the next draft's launch is in
the draft's span there), which the cells' unprofiled judgment and TPOT use. At draft->verify, the modes with
captured graphs add the device's hand-over from the draft's last record to the
verify's first (``draft_handover``: a switch between graphs, or in one graph
the verify stream's wait for the draft's). The figures come from ``--costs`` (by batch,
else pooled); where it lacks them, from the runs' kernel traces beside
bench.json (``kernel_trace``), measured the way the bench measures them.
``inductor`` runs ``SpecVerifyRuntime`` unchanged (``FIGURES_OF``), so without
figures of its own it takes specgen's.  ``WHY`` says, per mode and figure,
what the model is known to miss; the markdown output lists it under the
cells that miss.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from .common import UsageError
from .plan_compare_cells import GOAL, MEASURED, _bubble, _error, cells, predicted_tpot_ms, summary  # noqa: F401
from .plan_compare_markdown import WHY, cells_markdown, markdown, unprofiled_markdown, why_markdown
from .plan_compare_plot import plot
from .plan_compare_terms import (
    AFTER_SYNC,
    FIGURES_OF,
    HEAD_AS_RAN,
    OUT_OF_PLAN,
    OUT_OF_PLAN_D2V,
    REPLACES_PLAN,
    TERMS_AT,
    head_launches,
    out_of_plan,
    sources,
    trace_terms,
)

__all__ = [
    "FIGURES_OF",
    "GOAL",
    "HEAD_AS_RAN",
    "MODE_PIPELINES",
    "OUT_OF_PLAN",
    "OUT_OF_PLAN_D2V",
    "WHY",
    "cells",
    "cells_markdown",
    "compare",
    "head_launches",
    "markdown",
    "run_compare",
    "summary",
    "trace_terms",
    "why_markdown",
]

DEFAULT = "default"
COMPILE_PIPELINE = "sync-to-event,hoist,fuse,capture"
MODE_PIPELINES = {"baseline": None, "compile": COMPILE_PIPELINE, "inductor": DEFAULT, "specgen": DEFAULT}
READ_BACK_FIRST = {"compile"}  # modes whose host waits for the step's result before the next draft
# modes whose host runs the acceptance after its read-back (baseline's host tail), where the boundary graph has it
# as device kernels before the read-back: their verify->draft adds the family's host time (``host_acceptance``)
HOST_ACCEPTANCE = {"baseline": "greedy_prefix_verify"}


def _read_back_first(graph):
    """``graph`` with its host syncs issued before the first op on the end op's stream after the start."""
    ops = list(graph.ops)
    names = [o.name for o in ops]
    end_stream = graph.op(graph.end).stream
    at = next((i for i in range(names.index(graph.start) + 1, len(ops)) if ops[i].stream == end_stream), None)
    syncs = [o for o in ops[at or 0 :] if o.kind.value == "host_sync"]
    if at is None or not syncs:
        return graph
    rest = [o for o in ops if o not in syncs]
    k = rest.index(ops[at])
    return dataclasses.replace(graph, ops=tuple(rest[:k] + syncs + rest[k:]))


def _graph(boundary: str, mode: str, run: dict, layout: dict):
    from ..passes import DEFAULT_PIPELINE, build_boundary, run_pipeline

    kw = dict(
        width=run["width"],
        batch=run["batch"],
        block_size=layout.get("block_size", 16),
        block_table_width=layout.get("block_table_width", 32),
    )
    if run.get("draft_us") and run.get("depth"):
        kw["draft_us"] = float(run["draft_us"]) / run["depth"]
    if run.get("bare_verify_us"):
        kw["forward_us"] = float(run["bare_verify_us"])
    graph = build_boundary(boundary, **kw)
    pipeline = MODE_PIPELINES[mode]
    if pipeline is not None:
        graph, _ = run_pipeline(graph, DEFAULT_PIPELINE if pipeline == DEFAULT else pipeline)
    if mode in READ_BACK_FIRST and boundary == "verify-to-draft":
        graph = _read_back_first(graph)
    return graph


def _calibrated(costs: dict | None, batch: int):
    from ..passes import CostModel

    if costs is None:
        return None
    return CostModel.from_dict((costs.get("by_batch") or {}).get(str(batch), costs))


def _host_bound(graph, model) -> bool:
    """Whether a host synchronization lies on the bubble's critical path (the host waits, then works)."""
    from ..passes.ir.cost import simulate

    return any(graph.op(n).kind.value == "host_sync" for n in simulate(graph, model).critical_path(graph))


def _after_mark(boundary: str, graph, model, terms: dict) -> float:
    """The part of a host-bound verify->draft prediction that the bench's events leave to the next draft's span:
    the host's launch of the next draft and its device latency, which follow the stamp the step's draft span
    opens with (the timed steps' verify->draft ends there; ``draft_us`` holds them)."""
    if boundary != "verify-to-draft":
        return 0.0
    if "draft_launch" in terms:  # compile's turnaround: its launch terms
        return terms["draft_launch"] + terms.get("read_back_launch", 0.0)
    return model.issue_us(graph.op(graph.end))  # the planned launch of the next draft


def _until_sync(graph, model) -> float | None:
    """The planned bubble up to the end of its last host synchronization (None: no sync)."""
    from ..passes.ir.cost import simulate

    syncs = [o.name for o in graph.ops if o.kind.value == "host_sync"]
    if not syncs:
        return None
    s, start = simulate(graph, model), graph.op(graph.start)
    tail = start.attr("tail_kernels", 0) * model.in_graph_kernel + start.attr("tail_copies", 0) * model.in_graph_copy
    return max(0.0, s.finish[syncs[-1]] - (s.finish[graph.start] - tail))


def compare(result: dict, costs: dict | None = None, traces: dict | None = None) -> list[dict]:
    """One row per finished run of ``result`` (a bench.json) with a modelled mode, per boundary; ``traces``:
    ``trace_terms``' figures, for what ``costs`` lacks."""
    from ..passes import CostModel, bubble_us

    layout, rows = result.get("layout") or {}, []
    runs = [r for r in result["runs"] if "error" not in r and r.get("mode") in MODE_PIPELINES and r.get("width")]
    for boundary, (events_key, kernel_key) in MEASURED.items():
        for run in sorted(runs, key=lambda r: (r["depth"], r["batch"], list(MODE_PIPELINES).index(r["mode"]))):
            g = _graph(boundary, run["mode"], run, layout)
            cal = _calibrated(costs, run["batch"])
            model = cal or CostModel()  # the costs the prediction uses: the calibration, else the defaults
            pipeline = MODE_PIPELINES[run["mode"]]
            default = round(bubble_us(g, CostModel()), 2)
            calibrated = round(bubble_us(g, cal), 2) if cal is not None else None
            planned = default if calibrated is None else calibrated
            terms, src = out_of_plan(run["mode"], run["batch"], costs, traces, boundary)
            base = planned
            counted = ((traces or {}).get("head_launches") or {}).get(run["mode"], {})
            n = counted.get(f"{run['depth']}/{run['batch']}")
            if boundary == "draft-to-verify" and run["mode"] in HEAD_AS_RAN and n:
                # the launches the trace counts, each a graph kernel and its hand-over
                base = terms["graph_head"] = round(n * (model.in_graph_kernel + model.in_graph_gap), 3)
                src["graph_head"] = (
                    f"graph_head: {n:g} launches counted in the trace x (in_graph_kernel + in_graph_gap"
                    + ("" if cal else ", default")
                    + ")"
                )
            fam = HOST_ACCEPTANCE.get(run["mode"])
            if boundary == "verify-to-draft" and fam and cal is not None and fam in cal.host_family:
                # the host's acceptance in place of the graph's device kernels of the family, which the plan priced
                dev = sum(cal.run_us(o) for o in g.ops if o.attr("family") == fam and o.kind.value == "device_kernel")
                terms["host_acceptance"] = round(cal.host_family[fam] - dev, 3)
                src["host_acceptance"] = f"host_family.{fam} less the graph's {fam} kernels ({dev:g} us)"
            for term, held in REPLACES_PLAN.items():
                if term in terms:  # the measured tail replaces the planned one and the terms it holds
                    base = terms[term]
                    terms = {t: v for t, v in terms.items() if t not in held}
            after_sync = AFTER_SYNC if run["mode"] in READ_BACK_FIRST else ()
            predicted = base + sum(v for t, v in terms.items() if t not in ("graph_head", *after_sync, *REPLACES_PLAN))
            if after_sync and ("read_back" in terms or "host_turnaround" in terms):
                until = _until_sync(g, model)
                if until is None:
                    terms = {}
                else:  # the host clock's turnaround where the calibration has it, else the profiled one
                    drop = ("read_back",) if "host_turnaround" in terms else ("host_turnaround", "read_back_launch")
                    terms = {t: v for t, v in terms.items() if t not in drop}
                    if "host_turnaround" in terms:
                        terms["draft_launch"] = model.issue["graph_replay"]
                        src["draft_launch"] = "issue.graph_replay" + ("" if cal else ", default")
                    predicted = until + sum(terms.get(t, 0.0) for t in AFTER_SYNC)
            bound = _host_bound(g, model)
            rows.append(
                {
                    "boundary": boundary,
                    "mode": run["mode"],
                    "depth": run["depth"],
                    "batch": run["batch"],
                    "pipeline": "none (before passes)" if pipeline is None else pipeline,
                    "predicted_default_us": default,
                    "predicted_calibrated_us": calibrated,
                    "out_of_plan_us": terms,
                    "out_of_plan_from": sources(src, terms),
                    "predicted_us": round(predicted, 2),
                    "host_synced": bound,
                    "predicted_events_us": round(predicted - _after_mark(boundary, g, model, terms), 2)
                    if bound
                    else None,
                    "measured_events_us": run.get(events_key),
                    "measured_kernel_us": run.get(kernel_key),
                }
            )
    return rows


def _load(path: str, option: str):
    try:
        return json.loads(Path(path).read_text())
    except OSError as e:
        raise UsageError(f"{option} {path}: cannot read it ({e.strerror or e})") from None
    except ValueError as e:
        raise UsageError(f"{option} {path}: not JSON ({e})") from None


def run_compare(args, costs_check) -> int:
    """The ``--compare`` branch of ``specgen plan``: print the table (or JSON), write the JSON file."""
    from ..bench.report import ResultError, check

    try:
        result = check(_load(args.compare, "--compare"))
    except ResultError as e:
        raise UsageError(f"--compare {args.compare}: not a bench.json that specgen bench wrote ({e})") from None
    costs = None
    if args.costs:
        costs_check(args.costs)  # the shape, with the --costs messages
        costs = _load(args.costs, "--costs")
    traces = trace_terms(result, Path(args.compare).parent)
    rows = compare(result, costs, traces)
    if not rows:
        raise UsageError(f"--compare {args.compare}: no finished run of a modelled mode ({', '.join(MODE_PIPELINES)})")
    out = Path(args.compare_json) if args.compare_json else Path(args.compare).with_name("compare.json")
    table = cells(result, rows)
    doc = {
        "bench": str(args.compare),
        "costs": args.costs,
        "mode_pipelines": MODE_PIPELINES,
        "out_of_plan": {
            "terms": TERMS_AT,
            "figures_of": FIGURES_OF,
            "traces": traces["files"],
            "head_as_ran": {m: traces["head_launches"].get(m, {}) for m in sorted(HEAD_AS_RAN)},
            # terms the compare derives from other figures rather than reads
            "derived": {
                "graph_head": "compile's head launches counted in its trace x (in_graph_kernel + in_graph_gap)",
                "draft_launch": "issue.graph_replay, with a host-clocked host_turnaround (compile)",
                "host_acceptance": "host_family.greedy_prefix_verify less the graph's device acceptance (baseline)",
            },
        },
        "goal": GOAL,
        "cells": table,
        "summary": summary(table),
        "rows": rows,
    }
    try:
        out.write_text(json.dumps(doc, indent=1) + "\n")
    except OSError as e:
        raise UsageError(f"--compare-json {out}: cannot write it ({e.strerror or e})") from None
    picture = plot(doc, out.with_suffix(".png"))  # where matplotlib is installed and a figure was measured
    on_cpu = (result.get("environment") or {}).get("clock") == "host perf_counter"
    if args.format == "json":
        print(json.dumps(doc, indent=2))
        return 0
    print(cells_markdown(table, on_cpu))
    parts = ("draft_to_verify", "verify_to_draft", "tpot")
    tally = ", ".join(f"{k} {v['within_goal']}/{v['measured']}" for k, v in doc["summary"].items() if k in parts)
    print(
        f"\nwithin the goal (bubbles max({GOAL['bubble_rel']:.0%}, {GOAL['bubble_us']:g} us), TPOT "
        f"{GOAL['tpot_rel']:.0%}), of the measured cells: {tally}\n"
    )
    why = why_markdown(table, result.get("side_streams") is False, costs)
    if why:
        print(why + "\n")
    if doc["summary"]["host_bound_unprofiled"]["measured"]:
        print(unprofiled_markdown(table) + "\n")
    if traces["files"]:
        print(f"out-of-plan figures the calibration lacks measured from: {', '.join(traces['files'])}\n")
    print(markdown(rows, costs is not None, on_cpu))
    print(f"wrote {out}" + (f" and {picture}" if picture else ""))
    return 0
