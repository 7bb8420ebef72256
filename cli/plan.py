"""``specgen plan``: run the pass pipeline on one boundary and show it before and after."""

from __future__ import annotations

import json
from pathlib import Path

from .common import UsageError

_COUNTS = ("host_syncs_on_critical_path", "h2d_copies_on_critical_path", "host_calls_after_final_draft",
           "predicted_bubble_us")


def run(args) -> int:
    from ..passes import (DEFAULT_PIPELINE, BoundaryGraphError, CostModel, PassManager, PassPipelineError,
                          build_boundary, render_mermaid, render_text, summary)
    from ..specializations.capabilities import SpeculativeVerifyCapabilities

    try:
        model = CostModel.from_json(args.costs) if args.costs else None
    except (OSError, ValueError) as e:
        raise UsageError(f"cost file: {e}") from None
    caps = SpeculativeVerifyCapabilities(has_linear_state=args.linear_state)
    try:
        before = build_boundary(args.boundary, width=args.width, batch=args.batch, block_size=args.block_size,
                                block_table_width=args.block_table_width, draft_dtype=args.draft_dtype, caps=caps)
        pm = PassManager.from_text(args.pipeline or DEFAULT_PIPELINE,
                                   dump_dir=Path(args.dump_dir) if args.dump_dir else None)
        after = pm.run(before)
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


def register(sub) -> None:
    p = sub.add_parser("plan", help="run the pass pipeline on one boundary and show before/after")
    p.add_argument("--boundary", required=True, help="draft-to-verify | verify-to-draft | context-kv")
    p.add_argument("--width", type=int, default=4, help="verify width W = draft depth + 1 (2..16)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--block-table-width", type=int, default=64)
    p.add_argument("--draft-dtype", choices=("int32", "int64"), default="int32")
    p.add_argument("--linear-state", action="store_true", help="the model has recurrent-state slots (hybrid)")
    p.add_argument("--pipeline", help="e.g. 'sync-to-event,hoist,fuse{max-group=8},capture'")
    p.add_argument("--costs", help="JSON calibration file overriding the cost model")
    p.add_argument("--format", choices=("text", "mermaid", "json"), default="text")
    p.add_argument("--dump-dir", help="write every stage as {idx:03d}_{pass}.txt")
    p.set_defaults(func=run)
