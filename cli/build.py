"""``specgen build``: plan the matrix, then generate and compile its kernel variants ahead of time."""

from __future__ import annotations

import sys

from .common import UsageError, int_list


def _names(text: str | None, known, what: str) -> list[str]:
    """Comma-separated names, each checked against ``known``."""
    names = [n for n in (text or "").split(",") if n]
    for n in names:
        if n not in known:
            raise UsageError(f"unknown {what} '{n}' (known: {', '.join(known)})")
    return names


def _matrix(args):
    from ..specializations import DEFAULT, load_toml

    matrix = load_toml(args.matrix) if args.matrix else DEFAULT
    return matrix.with_overrides(
        widths=int_list(args.widths) if args.widths else None,
        block_table_widths=int_list(args.block_table_widths) if args.block_table_widths else None,
        block_sizes=int_list(args.block_sizes) if args.block_sizes else None,
        draft_dtypes=[d for d in args.draft_dtypes.split(",") if d] if args.draft_dtypes else None)


def run(args) -> int:
    from ..codegen.build import BuildError
    from ..codegen.lower import ToolchainMissing
    from ..driver import plan_and_build
    from ..passes import BoundaryGraphError
    from ..specializations import BOUNDARY_NAMES, FAMILIES, TARGETS, MatrixError

    targets = _names(args.target, TARGETS, "target")
    boundaries = _names(args.boundary or ",".join(BOUNDARY_NAMES), BOUNDARY_NAMES, "boundary")
    families = tuple(_names(args.families, FAMILIES, "family"))
    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    try:
        summary = plan_and_build(_matrix(args), targets, args.out, arch=args.arch, jobs=args.jobs,
                                 boundaries=tuple(boundaries), families=families or None,
                                 progress=None if args.quiet else sys.stderr)
    except (MatrixError, ToolchainMissing, BuildError, BoundaryGraphError) as e:
        raise UsageError(str(e)) from None
    print(summary.line())
    for f in summary.failed:
        print(f"  failed: {f}")
    return 1 if summary.failed else 0


def register(sub) -> None:
    p = sub.add_parser("build", help="generate and compile the kernel variants ahead of time")
    p.add_argument("--target", default="c", help="c | cuda | ascend, comma-separated (default c)")
    p.add_argument("--arch", default="sm_90", help="CUDA architecture for --target cuda (default sm_90)")
    p.add_argument("--out", default="build/specgen_kernels", help="output folder, an importable package")
    p.add_argument("--jobs", type=int, default=1, help="parallel lowering/compile workers")
    p.add_argument("--boundary", help="boundaries to plan (default all three), comma-separated")
    p.add_argument("--widths", help="verify widths, e.g. 4,5,6 or 2-16")
    p.add_argument("--block-table-widths", help="e.g. 32,64")
    p.add_argument("--block-sizes", help="e.g. 16,128")
    p.add_argument("--draft-dtypes", help="int32,int64")
    p.add_argument("--families", help="only these kernel families, comma-separated")
    p.add_argument("--matrix", help="a TOML file with the specialization matrix")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=run)
