"""Subcommands beyond ``plan``: build, doctor, bench."""

from __future__ import annotations

from .cli import UsageError, _int_list, command


def _cmd_build(args) -> int:
    from .codegen.build import BuildError
    from .codegen.lower import ToolchainMissing
    from .driver import plan_and_build as build
    from .specializations import BOUNDARY_NAMES, DEFAULT, FAMILIES, TARGETS, MatrixError, load_toml

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


def _cmd_bench(args) -> int:
    import json
    from pathlib import Path

    from . import bench

    args.argv = list(args.cli_argv[1:])  # the words after "bench"
    if args.replot:
        try:
            result = json.loads(Path(args.replot).read_text())
        except (OSError, ValueError) as e:
            raise UsageError(f"--replot {args.replot}: {e}") from None
        png = bench.plot(result, Path(args.replot).with_name("timeline.png"))
        if png is None:
            raise UsageError("--replot needs matplotlib (pip install 'specgen[plot]')")
        print(f"wrote {png}")
        return 0
    args.depth = _int_list(args.depth)
    args.batch = _int_list(args.batch)
    try:
        result = bench.run_bench(args)
    except bench.BenchError as e:
        raise UsageError(str(e)) from None
    print(bench.table(result))
    for p in bench.write(result, Path(args.out)):
        print(f"wrote {p}")
    return 0


@command
def add_bench(sub) -> None:
    p = sub.add_parser("bench", help="decode with baseline / compile / specgen boundaries and measure them")
    p.add_argument("--model", default="tiny", choices=["tiny", "qwen3-0.6b"], help="model preset (random weights)")
    p.add_argument("--depth", default="3", help="draft depths (verify width = depth + 1), e.g. 3 or 3,4,5")
    p.add_argument("--batch", default="1", help="batch sizes, e.g. 1,8,32")
    p.add_argument("--steps", type=int, default=32, help="timed decode steps per run")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (capture, compilation)")
    p.add_argument("--modes", default="baseline,compile,specgen", help="comma-separated")
    p.add_argument("--acceptance", type=float, help="drafts agree with the target with probability p "
                   "(default: the MTP head's own drafts)")
    p.add_argument("--check", action="store_true", help="also compare every mode with plain greedy decoding")
    p.add_argument("--out", default="bench_results", help="folder for bench.json and timeline.png")
    p.add_argument("--kernels", help="kernel build folder (default build/bench_kernels, built when missing)")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--block-table-width", type=int, default=32, help="blocks per sequence (0: just enough)")
    p.add_argument("--prompt-len", type=int, default=32, help="longest prompt; lengths vary down to half")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                   help="auto: bfloat16 for qwen3-0.6b on CUDA, else float32")
    p.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bare-repeats", type=int, default=30, help="draft + bare verify replays timed for the boundary figures")
    p.add_argument("--replot", metavar="BENCH_JSON", help="only redraw timeline.png from a bench.json")
    p.set_defaults(func=_cmd_bench)
