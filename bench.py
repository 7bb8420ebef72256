"""``specgen bench``: one speculative decode loop, three boundary modes, measured side by side.

For every (depth, batch) the same model, MTP head and prompts run in each
mode (``baseline``, ``compile``, ``specgen``; see
``specgen.runtime.engine.engine``).  Reported per run: TPOT, tokens/s,
the draft->verify boundary (median verify span minus the bare verify graph),
the verify->next-draft gap, the draft graph, host synchronizations per step
(counted by torch.cuda's sync debug mode), the measured acceptance, and
whether the mode's tokens equal the other modes' (and plain greedy decoding
with ``--check``).  Writes ``bench.json`` (every figure and the command) and
``timeline.png`` (one step per mode) to ``--out``.
"""

from __future__ import annotations

import json
import platform
import random
import sys
import time
from pathlib import Path
from statistics import median

MODES = ("baseline", "compile", "specgen")
PHASES = (("draft", "draft_us", "#8da0cb"), ("draft->verify boundary", "draft_to_verify_us", "#fc8d62"),
          ("verify graph", "bare_verify_us", "#66c2a5"), ("verify->draft gap", "verify_to_draft_us", "#e78ac3"))


class BenchError(Exception):
    """A configuration the bench cannot run (one line for the CLI)."""


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _ensure_kernels(kernels: str | None, widths, block_table_width: int, block_size: int, target: str):
    """The kernel library for the bench's layout; builds missing variants ahead of the run when it can."""
    from specgen.runtime.library import load_library

    out = Path(kernels or "build/bench_kernels")
    keys = [f"w{w}_bt{block_table_width}_bs{block_size}_int32" for w in widths]

    todo = keys
    if (out / "manifest.json").exists():
        lib = load_library(out)
        todo = [k for k in keys if not _built_for(lib, k, target)]
    if todo:
        try:
            from specgen.driver import plan_and_build as build
            from specgen.specializations import Matrix
        except ImportError as e:  # no TileLang on this machine: kernels must come prebuilt
            raise BenchError(f"kernels for {', '.join(todo)} ({target}) are not built in {out} and this machine "
                             f"cannot build them ({e}); run specgen build --target {target} --widths "
                             f"{','.join(map(str, widths))} --block-table-widths {block_table_width} "
                             f"--block-sizes {block_size} --out {out} where TileLang is installed") from None
        _log(f"bench: building {len(todo)} missing layout(s) for target {target} into {out}")
        matrix = Matrix(widths=tuple(widths), block_table_widths=(block_table_width,), block_sizes=(block_size,),
                        draft_dtypes=("int32",))
        summary = build(matrix, (target,), out=out, jobs=2, boundaries=("draft-to-verify", "verify-to-draft"),
                        progress=sys.stderr)
        if summary.failed:
            raise BenchError(f"building the bench kernels failed: {summary.failed[0]}")
    return load_library(out)


def _built_for(lib, layout_key: str, target: str) -> bool:
    """Both boundary plans exist for the layout and every kernel they name is built for ``target``."""
    plans = [(lib.manifest.plans.get(b) or {}).get(layout_key) for b in ("draft-to-verify", "verify-to-draft")]
    if any(p is None for p in plans):
        return False
    names = {n for p in plans for n in p.get("kernel_families", [])}
    built = {e.key for e in lib.manifest.variants if e.target == target}
    return names <= built


def _prompts(batch: int, prompt_len: int, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(rng.randint(max(1, prompt_len // 2), prompt_len))]
            for _ in range(batch)]


def _summary(res, bare_us: float | None) -> dict:
    t = res.timings
    per_seq_tokens = res.timed_tokens / res.batch if res.batch else 0
    out = {
        "mode": res.mode, "width": res.width, "depth": res.width - 1, "batch": res.batch, "steps": res.steps,
        "acceptance": round(res.acceptance, 4),
        "tokens_per_step": round(per_seq_tokens / res.steps, 4) if res.steps else None,
        "elapsed_ms": round(res.elapsed_s * 1e3, 3),
        "tpot_ms": round(res.elapsed_s * 1e3 / per_seq_tokens, 4) if per_seq_tokens else None,
        "tokens_per_s": round(res.timed_tokens / res.elapsed_s, 1) if res.elapsed_s else None,
        "step_us": round(res.elapsed_s * 1e6 / res.steps, 2) if res.steps else None,
    }
    if t:
        gaps = [x.gap_us for x in t[:-1]]
        span = median(x.verify_span_us for x in t)
        syncs = [x.host_syncs for x in t if x.host_syncs is not None]
        out.update({
            "draft_us": round(median(x.draft_us for x in t), 2),
            "verify_span_us": round(span, 2),
            "bare_verify_us": round(bare_us, 2) if bare_us is not None else None,
            "draft_to_verify_us": round(span - bare_us, 2) if bare_us is not None else None,
            "verify_to_draft_us": round(median(gaps), 2) if gaps else None,
            "host_syncs_per_step": round(sum(syncs) / len(syncs), 3) if syncs else None,
        })
    if res.lagged_event_waits:
        out["lagged_event_waits_per_step"] = round(res.lagged_event_waits / max(res.steps, 1), 3)
    if res.runtime_stats is not None:
        out["runtime_stats"] = res.runtime_stats
    return out


def run_bench(args) -> dict:
    import torch

    from specgen.runtime.engine import ModelConfig

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = device.type == "cuda"
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            raise BenchError(f"unknown mode '{m}' (known: {', '.join(MODES)})")
    depths, batches = args.depth, args.batch
    if any(d < 1 for d in depths) or any(b < 1 for b in batches):
        raise BenchError("--depth and --batch values must be at least 1")
    if args.warmup < 1:
        raise BenchError("--warmup must be at least 1 (the first step of every run captures its graphs)")
    if args.steps < 1:
        raise BenchError("--steps must be at least 1")
    if args.acceptance is not None and not 0.0 <= args.acceptance <= 1.0:
        raise BenchError(f"--acceptance must lie in [0, 1], got {args.acceptance}")
    skipped = {}
    if "compile" in modes and not cuda:
        skipped["compile"] = "needs CUDA (torch.compile'd updates inside CUDA graphs); skipped on the CPU"
    run_modes = [m for m in modes if m not in skipped]
    for m, why in skipped.items():
        _log(f"bench: mode {m}: {why}")

    cfg = ModelConfig.preset(args.model)
    dtype = {"auto": torch.bfloat16 if cuda and args.model != "tiny" else torch.float32,
             "float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    widths = sorted({d + 1 for d in depths})
    need = args.prompt_len + (args.warmup + args.steps + 2) * max(widths) + 1
    if args.acceptance is not None:  # the oracle run decodes max_new_tokens, which reserves 3 W + 1 more
        need += 3 * max(widths) + 1
    bt = args.block_table_width or -(-need // args.block_size)
    if bt * args.block_size < need:
        raise BenchError(f"--block-table-width {bt} x --block-size {args.block_size} = {bt * args.block_size} "
                         f"positions; {args.steps} steps at depth {max(depths)} need {need}")
    lib = None
    if "specgen" in run_modes:
        lib = _ensure_kernels(args.kernels, widths, bt, args.block_size, "cuda" if cuda else "c")
    _log(f"bench: model {cfg.name} ({dtype}) on {device}; depths {depths}, batches {batches}, "
         f"{args.steps} steps (+{args.warmup} warm-up), layout bt{bt} bs{args.block_size}")
    tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        return _run_all(args, torch, device, cuda, cfg, dtype, depths, batches, widths, bt, lib, run_modes, skipped)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32


def _error_text(e: BaseException) -> str:
    """The first lines of an error that say something (no C++ frames), joined."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip() and not ln.lstrip().startswith("frame #")]
    return f"{type(e).__name__}: " + " | ".join(lines[:3]) if lines else type(e).__name__


def _run_all(args, torch, device, cuda, cfg, dtype, depths, batches, widths, bt, lib, run_modes, skipped) -> dict:
    from specgen.runtime.engine import MTPHead, Qwen3Model, greedy_generate
    from specgen.runtime.engine.engine import EngineError, OracleMix, SpecDecodeEngine

    t_model = time.perf_counter()
    model = Qwen3Model.create(cfg, seed=args.seed, dtype=dtype, device=device)
    head = MTPHead.create(model, seed=args.seed + 1)
    _log(f"bench: model ready in {time.perf_counter() - t_model:.1f}s")

    runs, checks = [], []
    total = len(depths) * len(batches) * len(run_modes)
    done = 0
    aborted = None

    def device_ok() -> bool:  # after a failure: is the device still usable? (a sticky error is not)
        nonlocal aborted
        if not cuda:
            return True
        try:
            torch.cuda.synchronize()
            return True
        except RuntimeError as e:
            aborted = f"the device failed and cannot continue: {_error_text(e)}"
            _log(f"bench: {aborted}; writing what finished")
            return False

    for batch in batches:
        if aborted:
            break
        prompts = _prompts(batch, args.prompt_len, cfg.vocab_size, args.seed + batch)
        greedy = None
        if args.check:
            t = time.perf_counter()
            greedy = greedy_generate(model, prompts, (args.warmup + args.steps) * max(widths) + max(widths) + 1)
            _log(f"bench: plain greedy reference for batch {batch} in {time.perf_counter() - t:.1f}s")
        for depth in depths:
            if aborted:
                break
            width = depth + 1
            new_tokens = (args.warmup + args.steps + 2) * width + 1
            oracle = None
            if args.acceptance is not None:
                # The target's own greedy tokens at this verify shape (a baseline run with the MTP head's
                # drafts): in bfloat16 a 1-row greedy forward can round differently from a W-row verify
                # forward, and an oracle from it would drift off the sequence the target actually decodes.
                t = time.perf_counter()
                ref_eng = SpecDecodeEngine(model, head, mode="baseline", width=width, batch=batch,
                                           block_size=args.block_size, block_table_width=bt)
                try:
                    ref_run = ref_eng.run(prompts, max_new_tokens=new_tokens)
                except EngineError as e:
                    raise BenchError(f"acceptance oracle: {e}") from None
                except RuntimeError as e:
                    why = f"acceptance oracle failed: {_error_text(e)}"
                    _log(f"bench: depth {depth} batch {batch}: {why}")
                    runs += [{"mode": m, "width": width, "depth": depth, "batch": batch, "error": why}
                             for m in run_modes]
                    done += len(run_modes)
                    ref_eng.close()
                    device_ok()
                    continue
                ref_eng.close()
                oracle = torch.tensor(ref_run.outputs, device=device)
                _log(f"bench: acceptance oracle for depth {depth} batch {batch} in {time.perf_counter() - t:.1f}s")
            tokens_by_mode = {}
            bare = None
            for mode in run_modes:
                mix = OracleMix(args.acceptance, oracle, cfg.vocab_size, seed=args.seed) if oracle is not None else None
                eng = SpecDecodeEngine(model, head, mode=mode, width=width, batch=batch, block_size=args.block_size,
                                       block_table_width=bt, library=lib, acceptance=mix)
                t = time.perf_counter()
                try:
                    res = eng.run(prompts, steps=args.steps, warmup_steps=args.warmup, timing=True)
                except EngineError as e:
                    raise BenchError(str(e)) from None
                except RuntimeError as e:  # a device failure in one run: record it, keep the others
                    done += 1
                    why = _error_text(e)
                    _log(f"bench: [{done}/{total}] depth {depth} batch {batch} {mode}: FAILED: {why}")
                    runs.append({"mode": mode, "width": width, "depth": depth, "batch": batch, "error": why})
                    eng.close()
                    if not device_ok():
                        break
                    continue
                if bare is None:
                    bare = eng.bare_verify_us(args.bare_repeats)
                eng.close()
                row = _summary(res, bare)
                tokens_by_mode[mode] = res.outputs
                if oracle is not None:
                    row["equals_target_reference"] = all(o == g[: len(o)] for o, g in zip(res.outputs, oracle.tolist()))
                if greedy is not None:
                    row["equals_greedy"] = all(o == g[: len(o)] for o, g in zip(res.outputs, greedy))
                runs.append(row)
                done += 1
                _log(f"bench: [{done}/{total}] depth {depth} batch {batch} {mode}: TPOT {row['tpot_ms']} ms, "
                     f"acceptance {row['acceptance']}, {time.perf_counter() - t:.1f}s")
            first = next(iter(tokens_by_mode.values()), None)
            same = all(v == first for v in tokens_by_mode.values())
            checks.append({"depth": depth, "batch": batch, "modes_agree": same})
            for row in runs[-len(run_modes):]:
                row["modes_agree"] = same
    env = {"device": torch.cuda.get_device_name(device) if cuda else platform.processor() or "cpu",
           "torch": torch.__version__, "python": platform.python_version(),
           "clock": "cuda-events" if cuda else "host perf_counter"}
    return {"command": "specgen bench " + " ".join(args.argv), "model": cfg.name, "dtype": str(dtype).split(".")[-1],
            "environment": env, "layout": {"block_size": args.block_size, "block_table_width": bt},
            "steps": args.steps, "warmup_steps": args.warmup, "acceptance_p": args.acceptance, "aborted": aborted,
            "skipped_modes": skipped, "runs": runs, "agreement": checks, "ratios": ratios(runs)}


def ratios(runs: list[dict]) -> list[dict]:
    """specgen's TPOT against baseline and compile, per (depth, batch) measured in the same run."""
    out = []
    by = {}
    for r in runs:
        if "error" not in r:
            by.setdefault((r["depth"], r["batch"]), {})[r["mode"]] = r
    for (depth, batch), modes in sorted(by.items()):
        s = modes.get("specgen")
        if not s or not s.get("tpot_ms"):
            continue
        row = {"depth": depth, "batch": batch}
        for other in ("baseline", "compile"):
            o = modes.get(other)
            if o and o.get("tpot_ms"):
                row[f"tpot_vs_{other}"] = round(s["tpot_ms"] / o["tpot_ms"] - 1.0, 4)
        out.append(row)
    return out


def table(result: dict) -> str:
    cols = [("depth", "depth"), ("batch", "B"), ("mode", "mode"), ("tpot_ms", "TPOT ms"),
            ("tokens_per_s", "tok/s"), ("draft_to_verify_us", "d->v us"), ("verify_to_draft_us", "v->d us"),
            ("bare_verify_us", "verify us"), ("draft_us", "draft us"), ("host_syncs_per_step", "syncs/step"),
            ("acceptance", "accept")]
    ok = [r for r in result["runs"] if "error" not in r]
    rows = [[("" if r.get(k) is None else str(r.get(k))) for k, _ in cols] for r in ok]
    head = [h for _, h in cols]
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    line = lambda vals: "  ".join(v.rjust(w) for v, w in zip(vals, widths))  # noqa: E731
    out = [line(head), line(["-" * w for w in widths])] + [line(r) for r in rows]
    for r in result["ratios"]:
        parts = [f"{k[8:]} {v * 100:+.1f}%" for k, v in r.items() if k.startswith("tpot_vs_")]
        out.append(f"depth {r['depth']} B={r['batch']}: specgen TPOT vs " + ", ".join(parts))
    for m, why in result["skipped_modes"].items():
        out.append(f"{m}: {why}")
    for r in result["runs"]:
        if "error" in r:
            out.append(f"depth {r['depth']} B={r['batch']} {r['mode']}: failed: {r['error']}")
    return "\n".join(out)


def plot(result: dict, path: Path) -> Path | None:
    """One step per mode as a timeline (one panel per depth x batch); None when matplotlib is absent."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    groups = {}
    for r in result["runs"]:
        if "error" not in r:
            groups.setdefault((r["depth"], r["batch"]), []).append(r)
    keys = sorted(groups)
    fig, axes = plt.subplots(len(keys), 1, figsize=(10, 1.2 + 1.1 * len(keys) * 1.4), squeeze=False)
    for ax, key in zip(axes[:, 0], keys):
        rows = groups[key]
        for y, r in enumerate(rows):
            x = 0.0
            for label, field, color in PHASES:
                w = r.get(field)
                if w is None:
                    continue
                w = max(float(w), 0.0)
                ax.barh(y, w, left=x, color=color, edgecolor="black", linewidth=0.3,
                        label=label if (key == keys[0] and y == 0) else None)
                x += w
            syncs = r.get("host_syncs_per_step")
            note = f"  {r['tpot_ms']} ms/token" + (f", {syncs:g} host syncs/step" if syncs is not None else "")
            ax.text(x, y, note, va="center", fontsize=7)
        ax.set_yticks(range(len(rows)), [r["mode"] for r in rows])
        ax.set_title(f"depth {key[0]}, batch {key[1]}: one decode step", fontsize=9)
        ax.set_xlabel("microseconds (median step)")
        ax.margins(x=0.4)
    axes[0, 0].legend(loc="upper center", bbox_to_anchor=(0.5, 1.6), ncol=4, fontsize=7)
    fig.suptitle(f"specgen bench: {result['model']} on {result['environment']['device']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write(result: dict, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "bench.json"]
    paths[0].write_text(json.dumps(result, indent=1) + "\n")
    png = plot(result, out / "timeline.png")
    if png is None:
        _log("bench: matplotlib is not installed, so no timeline.png (pip install 'specgen[plot]', then "
             f"specgen bench --replot {paths[0]})")
    else:
        paths.append(png)
    return paths

