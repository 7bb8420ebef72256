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
    """Add the ``bench`` subcommand to the ``sub`` parsers: one option per ``BenchSettings`` field."""
    from ..bench.config import options

    p = sub.add_parser("bench", help="decode with every boundary mode and measure them side by side")
    for name, default, opt in options():
        flag = opt.flag or "--" + name.replace("_", "-")
        p.add_argument(flag, dest=name, default=default, **_argument(opt, flag))
        if name == "check":  # where the command's own options read best in --help
            p.add_argument("--out", default="bench_results", help="folder for bench.json and timeline.png")
            p.add_argument("--kernels", help="kernel build folder (default build/bench_kernels, built when missing)")
    p.add_argument(
        "--replot",
        metavar="BENCH_JSON",
        help="only redraw the pictures of a bench.json: timeline.png, and kernel_breakdown.png from its traces",
    )
    p.set_defaults(func=run)


def _argument(opt, flag: str) -> dict:
    """The ``add_argument`` keywords of one setting's ``Option`` (its text read as ``opt.text`` says)."""
    from ..bench import config as c

    if opt.text == c.SWITCH:
        return {"action": "store_true", "help": opt.help}
    # the metavar argparse would derive from the option (the field's name may differ from it)
    metavar = opt.metavar or (None if opt.choices else flag.lstrip("-").replace("-", "_").upper())
    kw = {"help": opt.help, "metavar": metavar, "choices": opt.choices}
    read = {
        c.TEXT: None,
        c.INT: int,
        c.FLOAT: float,
        c.INTS: lambda text: tuple(int_list(text, flag)),
        c.NAMES: lambda text: tuple(name_list(text, flag)),
    }[opt.text]
    if read is not None:
        kw["type"] = read
    return {k: v for k, v in kw.items() if v is not None}


def _settings(args):
    """The ``BenchSettings`` of the parsed command line."""
    from ..bench.config import BenchSettings, options

    return BenchSettings(**{name: getattr(args, name) for name, _, _ in options()})


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
    # a step's device time by kind of kernel: from the bench.json, or from the traces saved beside it
    from ..bench.kernel_breakdown import breakdown_table
    from ..bench.kernel_plot import breakdowns_from_traces, plot_breakdown

    breakdowns_from_traces(result, png.parent)
    breakdown = breakdown_table(result)
    if breakdown:
        print(breakdown)
        print(f"wrote {plot_breakdown(result, png.parent)}")
    return 0


def run(args) -> int:
    """``specgen bench``: configure, check the output folder, build missing kernels, measure, report.

    The status is 0 when every run finished (and, with ``--check``, decoded the greedy tokens), 1 otherwise.
    """
    if args.replot:
        return _replot(args.replot)
    from ..bench import harness as bench
    from ..bench import report as bench_report
    from ..bench.kernel_breakdown import breakdown_table
    from ..parallel import group as parallel

    command = "specgen bench " + " ".join(args.cli_argv[1:])  # the words after "bench", as given
    try:
        config = _settings(args).resolve(command)
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
    breakdown = breakdown_table(result)
    if breakdown:  # the detail first, so that the table ends the output
        print(breakdown)
    print(bench_report.table(result))
    if not bench_report.ok_runs(result):
        print(
            f"specgen: no run finished; {out / 'bench.json'} and its timeline.png are left as they were",
            file=sys.stderr,
        )
        return 1
    for p in bench_report.write(result, out):
        print(f"wrote {p}")
    failed = bench_report.failures(result)  # the results are written; the status says a mode failed
    for line in failed:
        print(f"specgen: {line}", file=sys.stderr)
    return 1 if failed else 0


def _launch_ranks(args) -> int:
    """``specgen bench --tp N`` (or ``serve-bench --tp N``) outside torchrun: this same command as N local ranks
    (rank 0 reports)."""
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


def _ensure_kernels(kernels: str | None, config, command: str = "bench"):
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
        _build(out, todo, config, command)
    return _library(out)


def _library(out: Path):
    from ..runtime.library import load_library
    from ..runtime.manifest import ManifestError

    try:
        return load_library(out)
    except ManifestError as e:
        raise UsageError(f"--kernels {out}: {e}") from None


def _build(out: Path, todo, config, command: str = "bench") -> None:
    """Plan and build ``todo``'s layouts for the bench's target into ``out``."""
    target, widths = config.kernel_target, config.widths
    try:
        from ..driver import plan_and_build
        from ..specializations import Matrix
    except ImportError as e:  # no TileLang on this machine: kernels must come prebuilt
        raise UsageError(
            f"kernels for {', '.join(lay.key for lay in todo)} ({target}) are not built in {out} and "
            f"this machine cannot build them ({e}); run `specgen build --target {target} --boundary "
            f"{','.join(config.boundaries)} --widths {','.join(map(str, widths))} --block-table-widths "
            f"{config.block_table_width} --block-sizes {config.block_size} --draft-dtypes int32 --out {out}` "
            "where TileLang is installed"
        ) from None
    print(
        f"{command}: building {len(todo)} missing layout(s) for target {target} into {out}", file=sys.stderr, flush=True
    )
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
    """Every boundary plan exists for ``layout`` and every kernel they name, and the companions the runtime
    launches beside them (the device guard's check, the row remap), is built for ``target`` at today's
    contract of its family (a folder built before a family changed gets those variants built again)."""
    from ..specializations.families import COMPANIONS
    from ..specializations.variants import VariantSpec

    plans = [lib.manifest.plan(b, layout) for b in boundaries]
    if any(p is None for p in plans):
        return False
    names = {v.key for p in plans for v in p.kernels}
    names |= {VariantSpec.of(f, layout).key for b in boundaries for f in COMPANIONS.get(b, ())}
    stale = lib.stale()
    built = {e.key for e in lib.manifest.variants if e.target == target and (e.key, e.target) not in stale}
    return names <= built
