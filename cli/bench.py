"""``specgen bench``: decode with every boundary mode and measure them side by side.

The harness lives beside the engine (``bench/harness.py``); this
command parses the options, builds the kernels the run needs when they are
missing (planning and code generation happen here, above the runtime), runs
the harness and writes ``bench.json``, ``costs.json`` (the cost model's
calibration from the profiled steps) and ``timeline.png``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..specializations.plan import DRAFT_TO_VERIFY, VERIFY_TO_DRAFT
from .common import UsageError, int_list, name_list, writable_dir

__all__ = ["register"]

BENCH_BOUNDARIES = (DRAFT_TO_VERIFY, VERIFY_TO_DRAFT)  # the MTP draft's; a draft kind names its own


def register(sub) -> None:
    """Add the ``bench`` subcommand to the ``sub`` parsers."""
    p = sub.add_parser("bench", help="decode with every boundary mode and measure them side by side")
    p.add_argument(
        "--model", default="tiny", choices=["tiny", "qwen3-0.6b", "qwen3-8b"], help="model preset (random weights)"
    )
    p.add_argument("--depth", default="3", help="drafts per step (verify width = depth + 1), e.g. 3 or 3,4,5")
    p.add_argument("--draft", default="mtp", help="draft kind: mtp (default), dflash or dspark")
    p.add_argument(
        "--draft-weights",
        metavar="DIR",
        help="a DFlash / DSpark draft from a local safetensors folder (default: random weights)",
    )
    p.add_argument("--batch", default="1", help="batch sizes, e.g. 1,8,32")
    p.add_argument("--steps", type=int, default=32, help="timed decode steps per run")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (capture, compilation)")
    p.add_argument("--modes", help="registered boundary modes, comma-separated (default: every one)")
    p.add_argument(
        "--acceptance",
        type=float,
        help="drafts agree with the target with probability p (default: the MTP head's own drafts)",
    )
    p.add_argument("--check", action="store_true", help="also compare every mode with plain greedy decoding")
    p.add_argument("--out", default="bench_results", help="folder for bench.json and timeline.png")
    p.add_argument("--kernels", help="kernel build folder (default build/bench_kernels, built when missing)")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--block-table-width", type=int, default=32, help="blocks per sequence (0: just enough)")
    p.add_argument("--prompt-len", type=int, default=32, help="longest prompt; lengths vary down to half")
    p.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "float32", "bfloat16"],
        help="auto: bfloat16 for qwen3-0.6b on CUDA, else float32",
    )
    p.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--bare-repeats", type=int, default=30, help="draft + bare verify replays timed for the boundary figures"
    )
    p.add_argument(
        "--tp",
        type=int,
        default=1,
        help="tensor-parallel ranks of the target, one process per "
        "device (NCCL on GPUs, gloo on the CPU); launched here unless run under torchrun",
    )
    p.add_argument("--draft-tp", type=int, default=1, help="1: the MTP draft body whole on every rank; or --tp")
    p.add_argument(
        "--check-ranks",
        type=int,
        default=0,
        metavar="N",
        help="compare the ranks' step state every N steps; stop at the first differing field",
    )
    p.add_argument(
        "--profile-steps",
        type=int,
        default=8,
        help="after the timed runs, profile this many steps "
        "of each run with torch.profiler for the kernel-level figures and the cost model's calibration "
        "costs.json (the CPU: baseline runs, host compute only; 0: off)",
    )
    p.add_argument("--replot", metavar="BENCH_JSON", help="only redraw timeline.png from a bench.json")
    p.set_defaults(func=run)


def _modes(text: str | None) -> tuple[str, ...]:
    """The ``--modes`` list, each a registered mode (default: all of them)."""
    from ..engine.modes import MODES

    if text is None:
        return tuple(MODES)
    modes = tuple(name_list(text, "--modes"))
    for m in modes:
        if m not in MODES:
            raise UsageError(f"unknown mode '{m}' (known: {', '.join(MODES)})")
    return modes


def _replot(path: str) -> int:
    from ..bench.report import ResultError, check, plot

    try:
        result = check(json.loads(Path(path).read_text()))
    except OSError as e:
        raise UsageError(f"--replot {path}: cannot read it ({e.strerror or e})") from None
    except ValueError as e:  # not JSON, or not a bench result
        raise UsageError(f"--replot {path}: not a bench.json that specgen bench wrote ({e})") from None
    png = Path(path).with_name("timeline.png")
    writable_dir(png.parent, "--replot")
    try:
        drawn = plot(result, png)
    except ResultError as e:
        raise UsageError(f"--replot {path}: {e}") from None
    if drawn is None:
        raise UsageError("--replot needs matplotlib (pip install 'specgen[plot]')")
    print(f"wrote {drawn}")
    return 0


def run(args) -> int:
    """``specgen bench``: configure, check the output folder, build missing kernels, measure, report."""
    if args.replot:
        return _replot(args.replot)
    depths, batches = int_list(args.depth, "--depth"), int_list(args.batch, "--batch")
    modes = _modes(args.modes)
    from ..bench import harness as bench
    from ..bench import report as bench_report
    from ..parallel import group as parallel

    command = "specgen bench " + " ".join(args.cli_argv[1:])  # the words after "bench", as given
    try:
        config = bench.configure(
            model=args.model,
            depths=depths,
            batches=batches,
            modes=modes,
            steps=args.steps,
            warmup=args.warmup,
            acceptance=args.acceptance,
            check=args.check,
            block_size=args.block_size,
            block_table_width=args.block_table_width,
            prompt_len=args.prompt_len,
            dtype=args.dtype,
            device=args.device,
            seed=args.seed,
            bare_repeats=args.bare_repeats,
            command=command,
            draft=args.draft,
            draft_weights=args.draft_weights,
            tp=args.tp,
            draft_tp=args.draft_tp,
            check_ranks=args.check_ranks,
            profile_steps=args.profile_steps,
        )
        out = writable_dir(args.out, "--out")  # before the run: results that cannot be written are lost
        if config.cuda:
            parallel.check_gpus(config.tp)
        if config.tp > 1 and parallel.launched_ranks() is None:
            return _launch_ranks(args)
        tp = parallel.init_tensor_parallel(config.tp, args.device)
    except (bench.BenchError, parallel.TPError) as e:
        raise UsageError(str(e)) from None
    result = _measure(args, config, tp, out if tp.is_writer else None)
    tp.close()  # the engines, and their captured graphs, are gone by now (a failed rank just exits)
    if not tp.is_writer:
        return 0
    print(bench_report.table(result))
    if not bench_report.ok_runs(result):
        print(
            f"specgen: no run finished; {out / 'bench.json'} and its timeline.png are left as they were",
            file=sys.stderr,
        )
        return 1
    for p in bench_report.write(result, out):
        print(f"wrote {p}")
    return 0


def _launch_ranks(args) -> int:
    """``specgen bench --tp N`` outside torchrun: this same command as N local ranks (rank 0 reports)."""
    from ..parallel import launch

    return launch.launch([sys.executable, "-m", "specgen", *args.cli_argv], args.tp, quiet_ranks=True)


def _measure(args, config, tp, trace_dir) -> dict:
    """Run the harness on this rank; rank 0 builds missing kernels while the others wait."""
    from ..bench import harness as bench

    try:
        library = None
        if config.needs_library:
            if tp.is_writer:
                library = _ensure_kernels(args.kernels, config)
            tp.barrier()
            library = library or _library(Path(args.kernels or "build/bench_kernels"))
        return bench.run_bench(config, library, tp, trace_dir)
    except bench.BenchError as e:
        raise UsageError(str(e)) from None


def _ensure_kernels(kernels: str | None, config):
    """The kernel library for the bench's layouts; builds missing variants ahead of the run when it can."""
    from ..specializations.variants import Layout

    out = writable_dir(kernels or "build/bench_kernels", "--kernels")
    target = config.kernel_target
    layouts = [Layout(w, config.block_table_width, config.block_size) for w in config.widths]
    todo = layouts
    if (out / "manifest.json").exists():
        lib = _library(out)
        todo = [lay for lay in layouts if not _built_for(lib, lay, target, config.boundaries)]
    if todo:
        _build(out, todo, config)
    return _library(out)


def _library(out: Path):
    from ..runtime.library import load_library
    from ..runtime.manifest import ManifestError

    try:
        return load_library(out)
    except ManifestError as e:
        raise UsageError(f"--kernels {out}: {e}") from None


def _build(out: Path, todo, config) -> None:
    """Plan and build ``todo``'s layouts for the bench's target into ``out``."""
    target, widths = config.kernel_target, config.widths
    try:
        from ..driver import plan_and_build
        from ..specializations import Matrix
    except ImportError as e:  # no TileLang on this machine: kernels must come prebuilt
        raise UsageError(
            f"kernels for {', '.join(lay.key for lay in todo)} ({target}) are not built in {out} and "
            f"this machine cannot build them ({e}); run specgen build --target {target} --boundary "
            f"{','.join(config.boundaries)} --widths {','.join(map(str, widths))} --block-table-widths "
            f"{config.block_table_width} --block-sizes {config.block_size} --out {out} where TileLang "
            "is installed"
        ) from None
    print(f"bench: building {len(todo)} missing layout(s) for target {target} into {out}", file=sys.stderr, flush=True)
    matrix = Matrix(
        widths=tuple(widths),
        block_table_widths=(config.block_table_width,),
        block_sizes=(config.block_size,),
        draft_dtypes=("int32",),
    )
    summary = plan_and_build(matrix, (target,), out=out, jobs=2, boundaries=config.boundaries, progress=sys.stderr)
    if summary.failed:
        raise UsageError(f"building the bench kernels failed: {summary.failed[0]}")


def _built_for(lib, layout, target: str, boundaries=BENCH_BOUNDARIES) -> bool:
    """Every boundary plan exists for ``layout`` and every kernel they name is built for ``target``."""
    plans = [lib.manifest.plan(b, layout) for b in boundaries]
    if any(p is None for p in plans):
        return False
    names = {v.key for p in plans for v in p.kernels}
    built = {e.key for e in lib.manifest.variants if e.target == target}
    return names <= built
