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
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from .common import UsageError

__all__ = ["MODE_PIPELINES", "compare", "markdown", "run_compare"]

DEFAULT = "default"
COMPILE_PIPELINE = "sync-to-event,hoist,fuse,capture"
MODE_PIPELINES = {"baseline": None, "compile": COMPILE_PIPELINE, "inductor": DEFAULT, "specgen": DEFAULT}
READ_BACK_FIRST = {"compile"}  # modes whose host waits for the step's result before the next draft
MEASURED = {
    "draft-to-verify": ("draft_to_verify_us", "kernel_draft_to_verify_us"),
    "verify-to-draft": ("verify_to_draft_us", "kernel_verify_to_draft_us"),
}


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


def compare(result: dict, costs: dict | None = None) -> list[dict]:
    """One row per finished run of ``result`` (a bench.json) with a modelled mode, per boundary."""
    from ..passes import CostModel, bubble_us

    layout, rows = result.get("layout") or {}, []
    runs = [r for r in result["runs"] if "error" not in r and r.get("mode") in MODE_PIPELINES and r.get("width")]
    for boundary, (events_key, kernel_key) in MEASURED.items():
        for run in sorted(runs, key=lambda r: (r["depth"], r["batch"], list(MODE_PIPELINES).index(r["mode"]))):
            g = _graph(boundary, run["mode"], run, layout)
            cal = _calibrated(costs, run["batch"])
            pipeline = MODE_PIPELINES[run["mode"]]
            rows.append(
                {
                    "boundary": boundary,
                    "mode": run["mode"],
                    "depth": run["depth"],
                    "batch": run["batch"],
                    "pipeline": "none (before passes)" if pipeline is None else pipeline,
                    "predicted_default_us": round(bubble_us(g, CostModel()), 2),
                    "predicted_calibrated_us": round(bubble_us(g, cal), 2) if cal is not None else None,
                    "measured_events_us": run.get(events_key),
                    "measured_kernel_us": run.get(kernel_key),
                }
            )
    return rows


def _cell(v, missing: str) -> str:
    return missing if v is None else f"{v:g}"


def markdown(rows: list[dict], calibrated: bool, on_cpu: bool = False) -> str:
    """The rows as a markdown table; empty cells say what would fill them (the CPU has no kernel figures)."""
    no_kernels = "n/a (CPU)" if on_cpu else "needs a trace"
    head = (
        "| boundary | mode | depth | B | predicted, default costs (us) | predicted, calibrated (us) | "
        "measured, events (us) | measured, kernels (us) |"
    )
    out = [head, "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(
            f"| {r['boundary']} | {r['mode']} | {r['depth']} | {r['batch']} | "
            f"{_cell(r['predicted_default_us'], '')} | "
            f"{_cell(r['predicted_calibrated_us'], 'needs a trace' if not calibrated else 'n/a')} | "
            f"{_cell(r['measured_events_us'], 'n/a')} | {_cell(r['measured_kernel_us'], no_kernels)} |"
        )
    return "\n".join(out)


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
    rows = compare(result, costs)
    if not rows:
        raise UsageError(f"--compare {args.compare}: no finished run of a modelled mode ({', '.join(MODE_PIPELINES)})")
    out = Path(args.compare_json) if args.compare_json else Path(args.compare).with_name("compare.json")
    doc = {"bench": str(args.compare), "costs": args.costs, "mode_pipelines": MODE_PIPELINES, "rows": rows}
    try:
        out.write_text(json.dumps(doc, indent=1) + "\n")
    except OSError as e:
        raise UsageError(f"--compare-json {out}: cannot write it ({e.strerror or e})") from None
    on_cpu = (result.get("environment") or {}).get("clock") == "host perf_counter"
    print(json.dumps(doc, indent=2) if args.format == "json" else markdown(rows, costs is not None, on_cpu))
    if args.format != "json":
        print(f"wrote {out}")
    return 0
