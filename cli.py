"""The ``specgen`` command: plan, build, doctor, bench.

Bad input is a one-line error and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .passes.ir import BoundaryGraphError


class UsageError(Exception):
    """Bad input from the command line: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own errors: one line, status 2
        raise UsageError(message)


def _int_list(text: str) -> list[int]:
    out = []
    for part in filter(None, text.split(",")):
        lo, sep, hi = part.partition("-")
        try:
            out += list(range(int(lo), int(hi) + 1)) if sep else [int(lo)]
        except ValueError:
            raise UsageError(f"not a number list: '{text}' (use 4,5,6 or 2-16)") from None
    return out


def _cmd_plan(args) -> int:
    from .passes.boundaries import Capabilities, build_boundary
    from .passes.cost import CostModel
    from .passes.manager import DEFAULT_PIPELINE, PassManager, PassPipelineError
    from .passes.render import render_mermaid, render_text, summary

    try:
        model = CostModel.from_json(args.costs) if args.costs else None
    except (OSError, ValueError) as e:
        raise UsageError(f"cost file: {e}") from None
    caps = Capabilities(has_linear_state=args.linear_state)
    before = build_boundary(args.boundary, width=args.width, batch=args.batch, block_size=args.block_size,
                            block_table_width=args.block_table_width, draft_dtype=args.draft_dtype, caps=caps)
    try:
        pm = PassManager.from_text(args.pipeline or DEFAULT_PIPELINE,
                                   dump_dir=Path(args.dump_dir) if args.dump_dir else None)
    except PassPipelineError as e:
        raise UsageError(str(e)) from None
    after = pm.run(before)
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
        for k in ("host_syncs_on_critical_path", "h2d_copies_on_critical_path", "host_calls_after_final_draft",
                  "predicted_bubble_us"):
            print(f"{k}: {sb[k]} -> {sa[k]}")
        print("graph: " + ", ".join(sa["graph_ops"]))
    return 0


def _add_plan(sub) -> None:
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
    p.set_defaults(func=_cmd_plan)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="specgen", description="compile the host bubbles of speculative decoding away")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_plan(sub)
    for name, adder in _EXTRA_COMMANDS:
        adder(sub)
    return parser


_EXTRA_COMMANDS: list = []


def command(adder):
    """Register another subcommand (build, doctor, bench live in their own modules)."""
    _EXTRA_COMMANDS.append((adder.__name__, adder))
    return adder


def main(argv: list[str] | None = None) -> int:
    from . import commands  # noqa: F401  (registers build, doctor, bench)

    try:
        args = build_parser().parse_args(argv)
        args.cli_argv = list(sys.argv[1:] if argv is None else argv)  # what was asked, for records
        return int(args.func(args) or 0)
    except (UsageError, BoundaryGraphError, LookupError) as e:
        print(f"specgen: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specgen: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
