"""``specgen plan``: run the pass pipeline on one boundary and show it before and after.

``--compare BENCH_JSON`` instead sets the predicted bubbles of every boundary
and mode next to a bench's measured ones (``plan_compare``).
"""

from __future__ import annotations

import json
from pathlib import Path

from .common import UsageError, require_compiler, writable_dir

_COUNTS = (
    "host_syncs_on_critical_path",
    "h2d_copies_on_critical_path",
    "host_calls_after_final_draft",
    "predicted_bubble_us",
)


def run(args) -> int:
    require_compiler("plan", ("networkx",))  # the passes alone: plan runs where TileLang is not (the GPU machine)
    from ..passes import (
        DEFAULT_PIPELINE,
        BoundaryGraphError,
        CostModel,
        PassContext,
        PassManager,
        PassPipelineError,
        build_boundary,
        render_mermaid,
        render_text,
        summary,
    )
    from ..specializations.capabilities import SpeculativeVerifyCapabilities

    if args.compare:
        from .plan_compare import run_compare

        try:
            return run_compare(args, lambda path: _costs(path, CostModel))
        except (BoundaryGraphError, PassPipelineError, ValueError) as e:
            raise UsageError(f"--compare: {str(e).splitlines()[0]}") from None
    if not args.boundary:
        raise UsageError("the following arguments are required: --boundary (or --compare BENCH_JSON)")
    model = _costs(args.costs, CostModel) if args.costs else None
    caps = SpeculativeVerifyCapabilities(has_linear_state=args.linear_state)
    dump_dir = writable_dir(args.dump_dir, "--dump-dir") if args.dump_dir else None
    try:
        before = build_boundary(
            args.boundary,
            width=args.width,
            batch=args.batch,
            block_size=args.block_size,
            block_table_width=args.block_table_width,
            draft_dtype=args.draft_dtype,
            caps=caps,
        )
        try:
            pm = PassManager.from_text(_pipeline(args.pipeline or DEFAULT_PIPELINE), dump_dir=dump_dir)
        except ValueError as e:  # an option value that is not a number
            raise UsageError(f"--pipeline: {e}") from None
        ctx = PassContext(model=model)  # the passes decide with the calibration too
        after = pm.run(before, ctx)
    except (BoundaryGraphError, PassPipelineError) as e:
        raise UsageError(str(e)) from None
    if args.format == "json":
        print(json.dumps({"before": summary(before, model), "after": summary(after, model)}, indent=2))
    elif args.format == "mermaid":
        print(render_mermaid(before, f"{args.boundary} before"))
        print(render_mermaid(after, f"{args.boundary} after"))
    else:
        sb, sa = summary(before, model), summary(after, model)
        print("== before ==")
        print(render_text(before))
        print("== after ==")
        print(render_text(after))
        for k in _COUNTS:
            print(f"{k}: {sb[k]} -> {sa[k]}")
        print("graph: " + ", ".join(sa["graph_ops"]))
    return 0


def _costs(path: str, cost_model):
    """The ``--costs`` calibration, its shape checked first: {"run": {kind: us}, "issue": {...}, "in_graph_*": us}."""
    example = 'e.g. {"run": {"kernel": 4.0}, "issue": {"kernel": 2.5}, "in_graph_kernel": 1.0}'
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise UsageError(f"--costs {path}: cannot read it ({e.strerror or e})") from None
    except ValueError as e:
        raise UsageError(f"--costs {path}: not JSON ({e})") from None
    if not isinstance(data, dict):
        raise UsageError(f"--costs {path}: must be a JSON object, not {type(data).__name__}; {example}")
    for part in ("run", "issue", "host_family"):
        table = data.get(part, {})
        if not isinstance(table, dict) or not all(_number(v) for v in table.values()):
            kinds = "kernel families" if part == "host_family" else "op kinds"
            raise UsageError(f"--costs {path}: '{part}' must map {kinds} to microseconds; {example}")
    for key in ("in_graph_kernel", "in_graph_copy", "in_graph_gap"):
        if key in data and not _number(data[key]):
            raise UsageError(f"--costs {path}: '{key}' must be a number of microseconds; {example}")
    try:
        return cost_model.from_json(path)
    except (TypeError, ValueError) as e:
        raise UsageError(f"--costs {str(e).splitlines()[0]}") from None


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0


# smallest useful value of each integer pass option (a fuse group of one fuses nothing)
_OPTION_MIN = {("fuse", "max-group"): 2}


def _pipeline(text: str) -> str:
    """``--pipeline`` checked before it runs: at least one pass, integer options that mean something."""
    import re

    items = [s.strip() for s in re.split(r",(?![^{]*\})", text) if s.strip()]
    if not items:
        raise UsageError(f"--pipeline '{text}' names no pass (e.g. 'sync-to-event,hoist,fuse,capture')")
    for item in items:
        name, _, opts = item.partition("{")
        for opt in filter(None, (o.strip() for o in opts.rstrip("}").split(","))):
            key, _, val = (s.strip() for s in opt.partition("="))
            low = _OPTION_MIN.get((name.strip(), key))
            if low is None:
                continue  # the pass manager names unknown passes and options
            try:
                ok = int(val) >= low
            except ValueError:
                ok = False
            if not ok:
                raise UsageError(
                    f"--pipeline: {name.strip()}{{{key}={val}}}: {key} must be an integer of at least {low}"
                )
    return text


def register(sub) -> None:
    p = sub.add_parser("plan", help="run the pass pipeline on one boundary and show before/after")
    p.add_argument(
        "--boundary",
        help="draft-to-verify | verify-to-draft | context-kv | draft-to-verify-linear | "
        "verify-to-draft-sampled | context-kv-sampled (the tails of a batch that samples)",
    )
    p.add_argument("--width", type=int, default=4, help="verify width W = draft depth + 1 (2..16)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--block-table-width", type=int, default=64)
    p.add_argument("--draft-dtype", choices=("int32", "int64"), default="int32")
    p.add_argument(
        "--linear-state",
        action="store_true",
        help="a hybrid target's linear-attention state slots (draft-to-verify becomes draft-to-verify-linear)",
    )
    p.add_argument("--pipeline", help="e.g. 'sync-to-event,hoist,fuse{max-group=8},capture'")
    p.add_argument("--costs", help="JSON calibration file overriding the cost model")
    p.add_argument("--format", choices=("text", "mermaid", "json"), default="text")
    p.add_argument("--json", dest="format", action="store_const", const="json", help="the same as --format json")
    p.add_argument("--dump-dir", help="write every stage as {idx:03d}_{pass}.txt")
    p.add_argument(
        "--compare",
        metavar="BENCH_JSON",
        help="predicted bubble of each boundary and mode (default "
        "costs, and --costs) next to a bench.json's measured ones: a markdown table and a JSON file",
    )
    p.add_argument(
        "--compare-json",
        metavar="FILE",
        help="where --compare writes its JSON (default: compare.json beside BENCH_JSON)",
    )
    p.set_defaults(func=run)
