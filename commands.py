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


def _cmd_doctor(args) -> int:
    """Which targets can run here and which built variants load, with the reason when not."""
    import importlib.util
    import shutil

    import torch

    from .runtime.library import load_library
    from .runtime.manifest import read_artifact

    print(f"torch {torch.__version__}")
    print("target c: can run (CPU)" if shutil.which("g++") or shutil.which("clang++")
          else "target c: artifacts load; building needs g++ or clang++")
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        print(f"target cuda: {torch.cuda.get_device_name()} (sm_{major}{minor})")
    else:
        print("target cuda: no CUDA device visible to torch")
    print("nvcc: " + (shutil.which("nvcc") or "not on PATH (cuda builds need it)"))
    print("target ascend: " + ("torch_npu importable" if importlib.util.find_spec("torch_npu")
                               else "torch_npu not installed; nothing has been run on Ascend hardware"))
    try:
        lib = load_library(args.kernels)
    except Exception as e:  # noqa: BLE001  every reason is worth one line here
        print(f"kernels {args.kernels}: not loadable: {e}")
        return 1
    bad = 0
    for entry in lib.entries():
        try:
            read_artifact(entry, lib.root)  # the sha256 check
            if entry.target == "cuda" and not torch.cuda.is_available():
                raise RuntimeError("artifact intact; no CUDA device here to load it on")
            if entry.target == "ascend":
                raise RuntimeError("artifact intact; Ascend artifacts cannot be launched by this build")
            lib.launcher(entry)
            status = "loads"
        except Exception as e:  # noqa: BLE001
            status = f"does not load: {str(e).splitlines()[0]}"
            bad += 1
        print(f"  {entry.key} [{entry.target}]: {status}")
    return 1 if bad else 0


@command
def add_doctor(sub) -> None:
    p = sub.add_parser("doctor", help="what can run here, and which built variants load")
    p.add_argument("--kernels", default="build/specgen_kernels", help="a build folder")
    p.set_defaults(func=_cmd_doctor)
