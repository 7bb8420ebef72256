"""The serving benchmark: every (load, mode) of a ``ServeConfig`` through the serving loop, as one result.

For each load (a request rate, every request at once, or a closed loop) and
each mode, the seeded workload is built afresh and handed to a runner, which
returns the run's ``ServeRun`` (``engine/serving/results.py``).  The runner
over the engine's serving loop is ``loop_runner``; ``serve`` is the one call
into ``ServingLoop``.  Any other runner (a function ``(mode, requests or
ClosedLoop) -> ServeRun``) can stand in for it::

    result = run_sweep(config, loop_runner(config, library))
    print(serve_report.table(result))
"""

from __future__ import annotations

import platform
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable

from ..engine.serving import ClosedLoop, Request, ServeRun, Workload
from ..models.errors import EngineError
from .serve_config import Load, ServeConfig
from .support import BenchError, create_target, log, restrict_draft, still_running, switches

__all__ = [
    "LOOP_MODULE",
    "Runner",
    "acceptance_for",
    "loop_runner",
    "run_sweep",
    "serve",
    "serving_loop",
    "workload_for",
]

LOOP_MODULE = "specgen.engine.serving.loop"
Runner = Callable[[str, Any], ServeRun]  # (mode, a list of Requests or a ClosedLoop) -> the run's records


def serving_loop() -> type:
    """The engine's ``ServingLoop`` class; ``BenchError`` (one line) where this installation has none."""
    try:
        from ..engine.serving.loop import ServingLoop
    except ImportError as e:
        if e.name not in (LOOP_MODULE, None):  # the loop is there but something it imports is not
            raise
        raise BenchError(
            f"the serving loop is not available in this installation ({LOOP_MODULE}.ServingLoop: {e}); "
            "specgen serve-bench runs on it"
        ) from None
    return ServingLoop


def serve(
    loop_class: type, model, draft, library, config: ServeConfig, mode: str, load, observer=None, oracles=None
) -> ServeRun:
    """One serving run: ``ServingLoop(...)`` over ``model`` and ``draft`` in ``mode``, run on ``load`` (``observer``:
    the loop's, e.g. a ``TransitionProfiler``; ``oracles``: ``acceptance_for``'s cache)."""
    loop = loop_class(
        model=model,
        draft=draft,
        mode=mode,
        depth=config.depth,
        max_batch=config.max_batch,
        num_blocks=config.num_blocks,
        block_size=config.block_size,
        block_table_width=config.block_table_width,
        max_prefill_tokens=config.max_prefill_tokens,
        read_lag=config.read_lag,
        step_first=config.step_first,
        prefill_graphs=False if config.eager_prefill else None,
        kernels=library,
        acceptance=acceptance_for(model, config, load, oracles),
        sampling=config.temperature > 0,
        draft_sampling=config.draft_sampling,
    )
    loop.observer = observer
    with jit_compiles() as compiled:
        run = loop.run(load)
    run.jit_compiles = compiled
    return run


@contextmanager
def jit_compiles():
    """The names of the Triton kernels this process compiles while the block runs (a list, filled as they
    compile; an empty one without Triton): a compile inside a timed run is seconds of one iteration."""
    names: list[str] = []
    try:
        from triton import knobs
    except ImportError:
        yield names
        return
    before = knobs.runtime.jit_cache_hook

    def hook(*args, **kw):
        fn = kw.get("fn")
        names.append(getattr(fn, "name", None) or str(kw.get("repr", "?")))
        return before(*args, **kw) if before is not None else False

    knobs.runtime.jit_cache_hook = hook
    try:
        yield names
    finally:
        knobs.runtime.jit_cache_hook = before


def acceptance_for(model, config: ServeConfig, load, oracles: dict | None = None):
    """``--acceptance p`` as the loop takes it: an ``AcceptanceMix`` whose oracle row ``i`` is request ``i``'s
    greedy output (None: the draft's own drafts).  ``oracles`` keeps the greedy outputs by the requests' prompts
    and budgets: the loads of a sweep share their requests (only the arrivals differ), so one greedy decode
    serves every load and mode."""
    if config.acceptance is None:
        return None
    import torch

    from ..engine.acceptance import AcceptanceMix
    from ..engine.decode import greedy_generate

    reqs = sorted(load.workload.requests() if isinstance(load, ClosedLoop) else load, key=lambda r: r.id)
    longest = max(r.max_new_tokens for r in reqs) + config.depth + 1
    key = (longest, tuple(r.prompt for r in reqs))
    oracle = None if oracles is None else oracles.get(key)
    if oracle is None:
        outs = greedy_generate(model, [list(r.prompt) for r in reqs], longest, block_size=config.block_size)
        oracle = torch.tensor(outs, dtype=torch.long, device=model.embed_tokens.weight.device)
        if oracles is not None:
            oracles[key] = oracle
    return AcceptanceMix(config.acceptance, oracle, config.model.vocab_size, seed=config.seed)


def loop_runner(config: ServeConfig, library=None, tp=None) -> Runner:
    """The runner over the engine's serving loop: the target and the draft are built once, for every run.

    ``tp`` (a ``TensorParallel`` of several ranks): this rank's shard of the target (and of the MTP body with
    ``--draft-tp``); every rank serves the same requests in the same steps."""
    loop_class = serving_loop()
    from ..engine.draft_kinds import DRAFT_KINDS

    device = tp.device if tp is not None and tp.distributed else config.device
    model = create_target(config.model, config.model_path, config.seed, config.dtype, device)
    draft = DRAFT_KINDS[config.draft].create(model, seed=config.seed + 1)
    restrict_draft(draft, model, config.draft_vocab)  # the draft's LM head over a subset of the ids
    if tp is not None and tp.distributed:
        from ..models.tp import shard_head, shard_model

        model = shard_model(model, tp)
        if config.draft_tp > 1:
            draft = shard_head(draft, tp)
    warmed: set[str] = set()
    oracles: dict = {}  # the greedy outputs of the workload's requests, shared by every load and mode

    def run(mode: str, load) -> ServeRun:
        if mode not in warmed:  # an untimed first run pays the one-time costs: imports, kernel loads, captures
            serve(loop_class, model, draft, library, config, mode, warmup_load(config), oracles=oracles)
            warmed.add(mode)
        return serve(loop_class, model, draft, library, config, mode, load, oracles=oracles)

    def profile(mode: str, load) -> dict | None:
        """An extra, untimed run of ``load`` with ``--profile-transitions`` decode steps under the profiler (from
        the 8th): the device idle before each, by transition kind (``serve_transitions.py``)."""
        from .serve_transitions import TransitionProfiler

        prof = TransitionProfiler(start=8, count=config.profile_transitions)
        extra = serve(loop_class, model, draft, library, config, mode, load, observer=prof, oracles=oracles)
        prof.stop(model.embed_tokens.weight.device)
        return prof.result(extra)

    def marks(mode: str, load) -> dict:
        """An extra, untimed run of ``load`` with timing events at the ends of every step's and chunk's range
        (``DeviceMarks``, no profiler): the device idle outside them before each step, by transition kind."""
        from ..engine.profiling import DeviceMarks
        from .serve_transitions import summarize_idle, transition_idle_marks

        with DeviceMarks(model.embed_tokens.weight.device) as taken:
            extra = serve(loop_class, model, draft, library, config, mode, load, oracles=oracles)
        gaps = transition_idle_marks(taken.extents(), extra.steps)
        return {"gaps": gaps, "summary": summarize_idle(gaps)}

    run.profile, run.marks = profile, marks
    return run


def warmup_load(config: ServeConfig) -> list[Request]:
    """The untimed run before a mode's first timed one: two full batches of the workload's lengths, all at once,
    so the batch runs full, then shrinks row by row as the second wave finishes: the graphs, compiled functions and
    JIT-compiled kernels of most row counts and prompt lengths are built before anything is timed."""
    workload = Workload(
        num_requests=min(2 * config.max_batch, config.num_requests),
        rate=None,
        prompt_len=config.prompt_len,
        output_len=config.output_len,
        vocab=config.model.vocab_size,
        seed=config.seed + 1,
        **sampling_for(config),
    )
    return (_WithStops(workload, frozenset(config.stop_ids)) if config.stop_ids else workload).requests()


@dataclass
class _WithStops:
    """A workload whose requests all stop at ``stop_ids`` (what a ``ClosedLoop`` draws its requests from)."""

    workload: Workload
    stop_ids: frozenset

    def requests(self) -> list[Request]:
        reqs = self.workload.requests()
        for r in reqs:
            r.stop_ids = self.stop_ids
        return reqs

    def __getattr__(self, name: str):
        return getattr(self.workload, name)


def workload_for(config: ServeConfig, load: Load):
    """The seeded requests of one run: a list in arrival order, or a ``ClosedLoop`` over them."""
    workload = Workload(
        num_requests=config.num_requests,
        rate=load.rate,
        prompt_len=config.prompt_len,
        output_len=config.output_len,
        vocab=config.model.vocab_size,
        seed=config.seed,
        **sampling_for(config),
    )
    source = _WithStops(workload, frozenset(config.stop_ids)) if config.stop_ids else workload
    if load.in_flight is not None:
        return ClosedLoop(source, in_flight=load.in_flight)
    return source.requests()


def sampling_for(config: ServeConfig) -> dict:
    """The workload's sampling settings: ``--temperature``, ``--top-k``, ``--top-p`` for ``--sampled-share`` of
    the requests, request ``i`` seeded ``--seed + i`` (none at temperature 0: every request greedy)."""
    if config.temperature <= 0:
        return {}
    from ..runtime.sampling import SamplingParams

    params = SamplingParams(config.temperature, config.top_k, config.top_p, config.seed)
    return {"sampling": params, "sampled_share": config.sampled_share}


def _error_text(e: BaseException) -> str:
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def _environment(config: ServeConfig) -> dict:
    import torch

    dev = torch.cuda.get_device_name(config.device) if config.cuda else platform.processor() or "cpu"
    return {"device": dev, "torch": torch.__version__, "python": platform.python_version(), "switches": switches()}


def run_sweep(
    config: ServeConfig,
    runner: Runner,
    progress: Callable[[str], None] = log,
    every: float = 30.0,
    on_run: Callable[[dict], None] | None = None,
) -> dict:
    """Every (load, mode) through ``runner``; a run that raises is kept as an ``error`` entry.

    ``progress`` gets a line when each run starts and finishes (with its wall
    time) and, while one runs, one every ``every`` seconds.  ``on_run`` gets the
    result so far (``"partial": True``) after each finished run.
    """
    runs: list[dict] = []
    total, i = len(config.loads) * len(config.modes), 0
    for load in config.loads:
        for mode in config.modes:
            i += 1
            what = f"serve-bench: run {i}/{total}: {mode} at {load.label}"
            progress(f"{what}: started ({config.num_requests} requests)")
            t = time.perf_counter()
            try:
                with still_running(what, every, progress):
                    run = runner(mode, workload_for(config, load))
            except BenchError:
                raise
            except EngineError as e:  # the loop refuses the settings (a draft kind, a target, a mode): one line
                raise BenchError(f"{mode}: {(str(e).strip().splitlines() or [type(e).__name__])[0]}") from None
            except Exception as e:  # noqa: BLE001  one failed run; the others still run and are written
                wall = time.perf_counter() - t
                runs.append({"mode": mode, "load": load.label, "rate": load.rate, "in_flight": load.in_flight,
                             "wall_s": round(wall, 3), "error": _error_text(e)})  # fmt: skip
                progress(f"{what}: failed after {wall:.1f}s: {runs[-1]['error']}")
                continue
            wall = time.perf_counter() - t
            if run.rate is None and run.in_flight is None:  # what was asked, where the loop did not say
                run.rate, run.in_flight = load.rate, load.in_flight
            runs.append({"load": load.label, "wall_s": round(wall, 3), **run.to_json()})
            m = runs[-1]["metrics"]
            tps = m["output_tokens_per_s"]
            progress(
                f"{what}: finished in {wall:.1f}s ({m['finished']}/{m['requests']} requests"
                + (f", {tps:.1f} output tokens/s)" if tps is not None else ")")
            )
            if on_run is not None:  # the runs so far, e.g. written, so a sweep cut short keeps them
                on_run(_result(config, runs, partial=True))
    _profile_transitions(config, runner, runs, progress, on_run)
    return _result(config, runs)


def _profile_transitions(config: ServeConfig, runner: Runner, runs: list[dict], progress, on_run) -> None:
    """The profiled extra run of the first load per mode, after every timed run: a profiler leaves CUPTI
    initialized in the process and later launches slower, so no timed run may follow one."""
    profile = getattr(runner, "profile", None)
    if not config.profile_transitions or profile is None:
        return
    load = config.loads[0]
    entries = {}
    for mode in config.modes:
        entry = next((r for r in runs if r["mode"] == mode and r["load"] == load.label and "error" not in r), None)
        if entry is not None:  # else its timed run failed: nothing to set beside
            entries[mode] = entry
    marks = getattr(runner, "marks", None)
    for mode, entry in entries.items():  # before any profiler initializes CUPTI
        if marks is None:
            break
        what = f"serve-bench: {mode} at {load.label}"
        progress(f"{what}: a run with timing events at each step's and chunk's ends")
        try:
            idle = marks(mode, workload_for(config, load))
        except Exception as e:  # noqa: BLE001  a failed extra run keeps the timed runs
            progress(f"{what}: the run with timing events failed: {_error_text(e)}")
            continue
        entry["transition_idle_marks"] = {"run": "an extra untimed run of this load, no profiler", **idle}
    for mode, entry in entries.items():
        what = f"serve-bench: {mode} at {load.label}"
        progress(f"{what}: a profiled run of {config.profile_transitions} decode steps")
        t = time.perf_counter()
        try:
            with still_running(f"{what}: the profiled run", 30.0, progress):
                idle = profile(mode, workload_for(config, load))
        except Exception as e:  # noqa: BLE001  a failed profile keeps the timed runs
            progress(f"{what}: the profiled run failed: {_error_text(e)}")
            continue
        if idle is not None:
            entry["transition_idle"] = {"run": "an extra untimed run of this load, after every timed run", **idle}
        progress(f"{what}: profiled in {time.perf_counter() - t:.1f}s")
        if on_run is not None:
            on_run(_result(config, runs, partial=True))


def _result(config: ServeConfig, runs: list[dict], partial: bool = False) -> dict:
    return {
        "command": config.command,
        "model": config.model_label,
        "draft": config.draft,
        "depth": config.depth,
        "environment": _environment(config),
        "settings": config.to_json(),
        "skipped_modes": dict(config.skipped),
        **({"partial": True} if partial else {}),
        "runs": runs,
    }
