"""``specgen build``: plan the matrix, then generate and compile its kernel variants ahead of time.

A build adds to its folder: variants other builds put there stay, and only
what this build makes is replaced; ``--replace`` makes the folder hold this
build's variants alone.
"""

from __future__ import annotations

import os
import re
import sys

from .common import UsageError, int_list, name_list, require_compiler, writable_dir

ARCH = re.compile(r"^sm_\d{2,3}[a-z]?$")
DEFAULT_ARCH = "sm_90"
_MATRIX_TYPES = {"widths": int, "block_table_widths": int, "block_sizes": int, "draft_dtypes": str}


def _names(text: str | None, known, what: str, option: str) -> list[str]:
    """Comma-separated names, each checked against ``known``; ``None``: none given."""
    if text is None:
        return []
    names = name_list(text, option)
    for n in names:
        if n not in known:
            raise UsageError(f"unknown {what} '{n}' (known: {', '.join(known)})")
    return names


def _matrix_file(path: str):
    """The TOML matrix, every value checked for its type first (the error names the key)."""
    from ..specializations import load_toml
    from ..specializations.matrix import _toml

    try:
        with open(path, "rb") as f:
            data = _toml().load(f)
    except OSError as e:
        raise UsageError(f"--matrix {path}: cannot read it ({e.strerror or e})") from None
    except ValueError as e:  # TOMLDecodeError
        raise UsageError(f"--matrix {path}: not valid TOML: {e}") from None
    for key, kind in _MATRIX_TYPES.items():
        value = data.get(key)
        if value is not None and (
            not isinstance(value, list)
            or not value
            or any(not isinstance(v, kind) or isinstance(v, bool) for v in value)
        ):
            raise UsageError(
                f"--matrix {path}: '{key}' must be a non-empty list of "
                f"{'integers' if kind is int else 'strings'}, e.g. {key} = "
                f"{[4, 5] if kind is int else ['int32']}; got {value!r}"
            )
    splits = data.get("num_splits")
    if splits is not None and (not isinstance(splits, int) or isinstance(splits, bool)):
        raise UsageError(f"--matrix {path}: 'num_splits' must be an integer, got {splits!r}")
    return load_toml(path)


def _matrix(args):
    from ..specializations import DEFAULT

    matrix = _matrix_file(args.matrix) if args.matrix else DEFAULT
    return matrix.with_overrides(
        widths=int_list(args.widths, "--widths") if args.widths is not None else None,
        block_table_widths=(
            int_list(args.block_table_widths, "--block-table-widths") if args.block_table_widths is not None else None
        ),
        block_sizes=int_list(args.block_sizes, "--block-sizes") if args.block_sizes is not None else None,
        draft_dtypes=name_list(args.draft_dtypes, "--draft-dtypes") if args.draft_dtypes is not None else None,
    )


def default_jobs() -> int:
    """One worker per CPU core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def run(args) -> int:
    require_compiler("build")
    from ..codegen.build import BuildError
    from ..codegen.lower import ToolchainMissing
    from ..driver import plan_and_build
    from ..specializations import BOUNDARY_NAMES, FAMILIES, TARGETS, MatrixError

    targets = _names(args.target, TARGETS, "target", "--target")
    boundaries = _names(args.boundary, BOUNDARY_NAMES, "boundary", "--boundary") or list(BOUNDARY_NAMES)
    families = tuple(_names(args.families, FAMILIES, "family", "--families"))
    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if args.arch is not None and "cuda" not in targets:
        raise UsageError(
            f"--arch {args.arch} is the CUDA architecture of --target cuda, and this build's targets are "
            f"{', '.join(targets)}; add --target {','.join([*targets, 'cuda'])}, or drop --arch"
        )
    arch = args.arch or DEFAULT_ARCH
    if not ARCH.match(arch):
        raise UsageError(f"--arch {arch}: not a CUDA architecture (write it like sm_80, sm_90 or sm_90a)")
    try:
        matrix = _matrix(args)
    except MatrixError as e:
        raise UsageError(str(e)) from None
    out = writable_dir(args.out, "--out")
    try:
        summary = plan_and_build(
            matrix,
            targets,
            out,
            arch=arch,
            jobs=args.jobs or default_jobs(),
            boundaries=tuple(boundaries),
            families=families or None,
            progress=None if args.quiet else sys.stderr,
            replace=args.replace,
        )
    except (MatrixError, ToolchainMissing, BuildError) as e:
        raise UsageError(str(e)) from None
    except Exception as e:
        from ..passes import BoundaryGraphError  # only planning raises it: a warm build never imports passes

        if isinstance(e, BoundaryGraphError):
            raise UsageError(str(e)) from None
        raise
    print(summary.line())
    for f in summary.failed:
        first, *rest = f.splitlines()
        print(f"  failed: {first}")
        for line in rest:  # the compiler's message (its last lines)
            print(f"    {line}")
    return 1 if summary.failed else 0


def register(sub) -> None:
    p = sub.add_parser("build", help="generate and compile the kernel variants ahead of time (adds to --out)")
    p.add_argument("--target", default="c", help="c | cuda | ascend, comma-separated (default c)")
    p.add_argument("--arch", help=f"CUDA architecture for --target cuda (default {DEFAULT_ARCH})")
    p.add_argument(
        "--out",
        default="build/specgen_kernels",
        help="output folder, an importable package; a build adds to what is there",
    )
    p.add_argument(
        "--replace", action="store_true", help="remove the variants earlier builds put in --out (default: keep them)"
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="parallel lowering/compile workers (default: one per CPU core this process may use)",
    )
    p.add_argument("--boundary", help="boundaries to plan (default all three), comma-separated")
    p.add_argument("--widths", help="verify widths, e.g. 4,5,6 or 2-16")
    p.add_argument("--block-table-widths", help="e.g. 32,64")
    p.add_argument("--block-sizes", help="e.g. 16,128")
    p.add_argument("--draft-dtypes", help="int32,int64")
    p.add_argument("--families", help="only these kernel families, comma-separated")
    p.add_argument("--matrix", help="a TOML file with the specialization matrix")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=run)
