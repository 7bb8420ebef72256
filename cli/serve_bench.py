"""``specgen serve-bench``: serve a seeded workload with every boundary mode and measure latency and throughput.

The options come from ``ServeSettings`` (``bench/serve_config.py``); the
sweep is ``bench/serve.py`` over the engine's serving loop and the output
``bench/serve_report.py``: a table on stdout, ``serve_bench.json``,
``latency_vs_rate.png`` and ``timeline.png`` in ``--out``.
"""

from __future__ import annotations

import sys

from .common import UsageError, writable_dir

__all__ = ["register", "run"]


def register(sub) -> None:
    """Add the ``serve-bench`` subcommand: one option per ``ServeSettings`` field, then the command's own."""
    from ..bench.serve_config import INTS_REPEATED, serve_options
    from .bench import _argument

    p = sub.add_parser("serve-bench", help="serve a seeded workload with every boundary mode: latency, throughput")
    for name, default, opt in serve_options():
        flag = opt.flag or "--" + name.replace("_", "-")
        if opt.text == INTS_REPEATED:
            p.add_argument(flag, dest=name, action="append", type=int, metavar=opt.metavar, help=opt.help)
            continue
        p.add_argument(flag, dest=name, default=default, **_argument(opt, flag))
    p.add_argument("--kernels", help="kernel build folder (default build/bench_kernels, built when missing)")
    p.add_argument("--out", default="serve_results", help="folder for serve_bench.json and the pictures")
    p.add_argument(
        "--progress-every", type=float, default=30.0, metavar="S", help="a progress line every S seconds of a run"
    )
    p.set_defaults(func=run)


def _settings(args):
    from ..bench.serve_config import ServeSettings, serve_options

    values = {name: getattr(args, name) for name, _, _ in serve_options()}
    values["stop_ids"] = tuple(values["stop_ids"] or ())
    return ServeSettings(**values)


STALL_S = 2.0  # an iteration longer than this is reported: a burst of prefills takes a fraction of it


def run(args, runner=None) -> int:
    """``specgen serve-bench``: configure, check ``--out``, run every (load, mode), print, write.

    ``runner`` (``(mode, requests or ClosedLoop) -> ServeRun``) replaces the
    engine's serving loop.  The status is 0 when every run finished, 1 when one
    failed or none did.
    """
    from ..bench import serve_report
    from ..bench.serve import loop_runner, run_sweep, serving_loop
    from ..bench.support import BenchError
    from ..parallel import group as parallel

    command = "specgen serve-bench " + " ".join(getattr(args, "cli_argv", ["serve-bench"])[1:])
    if args.progress_every <= 0:
        raise UsageError(f"--progress-every must be > 0 seconds, got {args.progress_every:g}")
    try:
        config = _settings(args).resolve(command.strip())
        out = writable_dir(args.out, "--out")  # before the runs: results that cannot be written are lost
        if not config.modes:
            skipped = "; ".join(f"{m}: {why}" for m, why in config.skipped)
            raise UsageError(f"--modes: no mode runs here ({skipped})")
        tp = None
        if runner is None:
            serving_loop()  # before building kernels or a model: a one-line error where there is no loop
            if config.cuda:
                parallel.check_gpus(config.tp)
            if config.tp > 1 and parallel.launched_ranks() is None:  # this same command as N local ranks
                from .bench import _launch_ranks

                return _launch_ranks(args)
            tp = parallel.init_tensor_parallel(config.tp, config.device)
            library = None
            if tp.is_writer:  # rank 0 builds missing kernels while the others wait
                library = _library(args, config)
            tp.barrier()
            library = library or _library(args, config)
            runner = loop_runner(config, library, tp)
        writer = tp is None or tp.is_writer
        result = run_sweep(
            config,
            runner,
            every=args.progress_every,
            on_run=(lambda r: serve_report.write_partial(r, out)) if writer else None,
        )
        if tp is not None:
            tp.close()
            if not writer:
                return 0
    except (BenchError, parallel.TPError) as e:
        raise UsageError(str(e)) from None
    print(serve_report.table(result))
    low = [r for r in serve_report.ok_runs(result) if _acceptance_below(r, config)]
    if low:
        print(
            f"note: the measured acceptance ({low[0]['metrics']['acceptance']:.2f} in {low[0]['mode']} at "
            f"{low[0]['load']}) is far below --acceptance {config.acceptance:g}: in {str(config.dtype).split('.')[-1]} "
            "the serving batches pick other near-tied tokens than the oracle's batched decode, and every later "
            "oracle draft of that request is rejected; --dtype float32 keeps them apart"
        )
    for r in serve_report.ok_runs(result):
        m = r["metrics"]
        if (m.get("longest_iteration_s") or 0.0) > STALL_S:
            print(
                f"note: {r['mode']} at {r['load']} stalled {m['longest_iteration_s']:.2f} s in one iteration (step "
                f"{m['longest_iteration_step']}): longer than any burst of prefills takes, as a compile or a capture "
                "inside the timed run would; its latency percentiles carry it"
            )
        if m.get("jit_compiles"):
            names = sorted(set(r.get("jit_compiles") or []))
            print(
                f"note: {r['mode']} at {r['load']} JIT-compiled {m['jit_compiles']} Triton kernel(s) inside the timed "
                f"run ({', '.join(names[:4])}{', ...' if len(names) > 4 else ''}): the warm-up run missed their shapes"
            )
    if not serve_report.ok_runs(result):
        print(f"specgen: no run finished; {out / serve_report.RESULT_FILE} is left as it was", file=sys.stderr)
        return 1
    for p in serve_report.write(result, out):
        print(f"wrote {p}")
    failed = serve_report.failures(result)
    for line in failed:
        print(f"specgen: {line}", file=sys.stderr)
    return 1 if failed else 0


def _library(args, config):
    """The kernel library the specgen mode loads (built ahead of the runs when missing), or None."""
    if not config.needs_library:
        return None
    from .bench import _ensure_kernels

    return _ensure_kernels(args.kernels, config, "serve-bench")


def _acceptance_below(run: dict, config) -> bool:
    """Whether ``run`` accepted under half of what ``--acceptance p`` asks (as bfloat16 random weights make it)."""
    measured = run["metrics"].get("acceptance")
    return config.acceptance is not None and measured is not None and measured < 0.5 * config.acceptance
