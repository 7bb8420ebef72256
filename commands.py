"""Subcommands beyond ``plan``: build, doctor, bench."""

from __future__ import annotations

from .cli import UsageError, _int_list, command


def _cmd_build(args) -> int:
    from .codegen.build import BOUNDARY_NAMES, TARGETS, BuildError, build
    from .codegen.families import FAMILIES
    from .codegen.lower import ToolchainMissing
    from .specializations import DEFAULT, MatrixError, load_toml

    targets = [t for t in args.target.split(",") if t]
    for t in targets:
        if t not in TARGETS:
            raise UsageError(f"unknown target '{t}' (known: {', '.join(TARGETS)})")
    boundaries = [b for b in (args.boundary or ",".join(BOUNDARY_NAMES)).split(",") if b]
    for b in boundaries:
        if b not in BOUNDARY_NAMES:
            raise UsageError(f"unknown boundary '{b}' (known: {', '.join(BOUNDARY_NAMES)})")
    families = tuple(f for f in (args.families or "").split(",") if f)
    for f in families:
        if f not in FAMILIES:
            raise UsageError(f"unknown family '{f}' (known: {', '.join(FAMILIES)})")
    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    try:
        matrix = load_toml(args.matrix) if args.matrix else DEFAULT
        matrix = matrix.with_overrides(
            widths=_int_list(args.widths) if args.widths else None,
            block_table_widths=_int_list(args.block_table_widths) if args.block_table_widths else None,
            block_sizes=_int_list(args.block_sizes) if args.block_sizes else None,
            draft_dtypes=[d for d in args.draft_dtypes.split(",") if d] if args.draft_dtypes else None)
        summary = build(matrix, targets, args.out, arch=args.arch, jobs=args.jobs, boundaries=tuple(boundaries),
                        families=families or None, progress=None if args.quiet else __import__("sys").stderr)
    except (MatrixError, ToolchainMissing, BuildError) as e:
        raise UsageError(str(e)) from None
    print(summary.line())
    for f in summary.failed:
        print(f"  failed: {f}")
    return 1 if summary.failed else 0


@command
def add_build(sub) -> None:
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
    p.set_defaults(func=_cmd_build)
