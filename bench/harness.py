"""The benchmark harness: one speculative decode loop, every boundary mode, measured side by side.

For every (depth, batch) the same model, MTP head and prompts run in each
mode of the registry (``modes.MODES``), each mode's first timed run after an
untimed one (``_Sweep._warm_up``).  Reported per run: TPOT, tokens/s,
the draft->verify boundary (median verify span minus the bare verify graph),
the verify->next-draft gap, the draft graph, host synchronizations per step
(counted by torch.cuda's sync debug mode), the measured acceptance, and
whether the mode's tokens equal the other modes' (and plain greedy decoding
with ``check``), and how long capturing the run's graphs took (``capture_s``).
On CUDA, once every timed run is done, ``bench_profile.KernelPass`` profiles
each run again for the kernel-level figures (``kernel_draft_to_verify_us``,
``head_us``, ``kernel_verify_to_draft_us``; None on the CPU).  ``configure`` validates the settings
into a ``BenchConfig``;
``run_bench`` measures; ``bench_report`` prints, plots and writes the result.
"""

from __future__ import annotations

import platform
import random
import time
from pathlib import Path

import torch

from ..engine.acceptance import AcceptanceMix
from ..engine.decode import greedy_generate
from ..engine.draft_kinds import DRAFT_KINDS
from ..engine.rank_check import RankCheck
from ..models.errors import EngineError
from ..models.tp import shard_head, shard_model
from ..parallel.group import TensorParallel, TPError
from .bare import bare_spans
from .config import BenchConfig, configure
from .host_clock import HostClock
from .profiler import KernelPass
from .rows import SUBJECT, fold_rounds, ratios, summary
from .support import (
    CPU_PRESETS,
    SETTLED,
    BenchError,
    load_target,
    log,
    restrict_draft,
    settled,
    still_running,
    switches,
)

__all__ = ["SUBJECT", "BenchConfig", "BenchError", "configure", "fold_rounds", "ratios", "run_bench", "summary"]


def run_bench(
    config: BenchConfig, library=None, tp: TensorParallel | None = None, trace_dir: Path | None = None
) -> dict:
    """Every (batch, depth, mode) of ``config``; ``library`` holds the kernels the modes that need one use.

    ``trace_dir``: where the kernel-level pass saves each run's trace (``bench_profile.trace_name``).

    With ``config.tp > 1`` every rank calls this with its ``tp`` (``parallel.init_tensor_parallel``)
    and runs the same sweep; the results are the same on every rank but rank 0's timings.
    """
    for m, why in config.skipped:
        log(f"bench: mode {m}: {why}")
    if not config.cuda and config.model_path is None and config.model.name not in CPU_PRESETS:
        log(
            f"bench: warning: {config.model.name} is sized for a GPU; on the CPU each run takes minutes "
            f"(--model tiny and --model qwen3.5-tiny are the CPU presets)"
        )
    log(
        f"bench: model {config.model_path or config.model.name} ({config.dtype}) on {config.device}, "
        f"{config.draft} draft; "
        f"depths {list(config.depths)}, batches {list(config.batches)}, {config.steps} steps (+{config.warmup} "
        f"warm-up; an untimed run of each mode first), layout bt{config.block_table_width} bs{config.block_size}"
    )
    tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        return _Sweep(config, library, tp or TensorParallel.single(config.device), trace_dir).run()
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32


def error_text(e: BaseException) -> str:
    """The first lines of an error that say something (no C++ frames), joined."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip() and not ln.lstrip().startswith("frame #")]
    return f"{type(e).__name__}: " + " | ".join(lines[:3]) if lines else type(e).__name__


def _prompts(batch: int, prompt_len: int, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [
        [rng.randrange(vocab) for _ in range(rng.randint(max(1, prompt_len // 2), prompt_len))] for _ in range(batch)
    ]


def _failed(mode: str, width: int, batch: int, why: str) -> dict:
    return {"mode": mode, "width": width, "depth": width - 1, "batch": batch, "error": why}


class _Sweep:
    """One bench invocation's state: the model, the rows so far, and whether the device gave out."""

    def __init__(self, config: BenchConfig, library, tp: TensorParallel, trace_dir: Path | None = None):
        self.config, self.library, self.trace_dir = config, library, trace_dir
        self.inputs: dict[tuple[int, int], tuple] = {}  # (width, batch) -> (prompts, oracle), for the profile
        t = time.perf_counter()
        try:  # every rank builds the full seeded model and keeps its share
            with still_running(f"creating {config.model.name}"):
                self.model = shard_model(load_target(config, tp.device), tp)
                self.kind = DRAFT_KINDS[config.draft]
                self.head = self.kind.create(self.model, seed=config.seed + 1, weights=config.draft_weights)
                if config.draft_tp > 1:
                    shard_head(self.head, tp)
        except (TPError, EngineError) as e:
            raise BenchError(str(e)) from None
        restrict_draft(self.head, self.model, config.draft_vocab)  # the draft's LM head over a subset of the ids
        self.rank_check = RankCheck(tp, config.check_ranks) if config.check_ranks and tp.distributed else None
        mtp = "; the MTP draft is the checkpoint's mtp.* module" if getattr(self.head, "from_checkpoint", False) else ""
        log(f"bench: model ready in {time.perf_counter() - t:.1f}s{mtp}")
        self.runs: list[dict] = []
        self.checks: list[dict] = []
        self.total = len(config.depths) * len(config.batches) * len(config.modes) * config.repeats
        self.done = 0
        self.aborted: str | None = None
        self._warmed: set[str] = set()  # the modes that had their untimed first run (``_warm_up``)
        self.host_clock = HostClock(enabled=config.profile_steps > 0)  # the unprofiled host API costs

    def _left(self) -> str:
        """``; about N min left`` from the runs so far, when more than a minute is left."""
        spent = time.perf_counter() - self.t_start
        left = spent / max(self.done, 1) * (self.total - self.done)
        return f"; about {left / 60:.0f} min left" if left > 60 else ""

    def run(self) -> dict:
        self.t_start = time.perf_counter()
        for batch in self.config.batches:
            if self.aborted:
                break
            self._batch(batch)
        calibration = None
        if self.config.profile_steps and not self.aborted:
            kp = KernelPass(self, self.trace_dir)
            kp.run(self.inputs)
            calibration = kp.calibration()
        result = self._result()
        if calibration is not None:
            result["calibration"] = calibration
        return result

    def _device_ok(self) -> bool:
        """After a failure: is the device still usable? (a sticky error is not)"""
        if not self.config.cuda:
            return True
        try:
            torch.cuda.synchronize()
            return True
        except RuntimeError as e:
            self.aborted = f"the device failed and cannot continue: {error_text(e)}"
            log(f"bench: {self.aborted}; writing what finished")
            return False

    def _batch(self, batch: int) -> None:
        c = self.config
        prompts = _prompts(batch, c.prompt_len, c.model.vocab_size, c.seed + batch)
        greedy = None
        if c.check:
            t = time.perf_counter()
            with still_running(f"plain greedy decoding for batch {batch}"):
                greedy = greedy_generate(self.model, prompts, (c.warmup + c.steps) * max(c.widths) + max(c.widths) + 1)
            log(f"bench: plain greedy decoding for batch {batch} in {time.perf_counter() - t:.1f}s")
        for depth in c.depths:
            if self.aborted:
                break
            self._depth(prompts, greedy, depth + 1, batch)

    def _oracle(self, prompts, width: int, batch: int) -> torch.Tensor | None:
        """The target's own greedy tokens at this verify shape (a baseline run with the MTP head's drafts).

        In bfloat16 a 1-row greedy forward can round differently from a W-row
        verify forward, and an oracle from it would drift off the sequence the
        target actually decodes.  None when the run failed (recorded).
        """
        c = self.config
        t = time.perf_counter()
        eng = self._engine("baseline", None, width, batch)
        try:
            with still_running(f"acceptance oracle for depth {width - 1} batch {batch}"):
                run = eng.run(prompts, max_new_tokens=(c.warmup + c.steps + 2) * width + 1)
        except EngineError as e:
            raise BenchError(f"acceptance oracle: {e}") from None
        except RuntimeError as e:
            why = f"acceptance oracle failed: {error_text(e)}"
            log(f"bench: depth {width - 1} batch {batch}: {why}")
            self.runs += [_failed(m, width, batch, why) for m in c.modes]
            self.done += len(c.modes)
            eng.close()
            self._device_ok()
            return None
        eng.close()
        log(f"bench: acceptance oracle for depth {width - 1} batch {batch} in {time.perf_counter() - t:.1f}s")
        return torch.tensor(run.outputs, device=c.device)

    def _depth(self, prompts, greedy, width: int, batch: int) -> None:
        c = self.config
        oracle = None
        if c.acceptance is not None:
            oracle = self._oracle(prompts, width, batch)
            if oracle is None:
                return
        self.inputs[(width, batch)] = (prompts, oracle)
        self._warm_up(prompts, oracle, width, batch)
        tokens_by_mode: dict[str, list] = {}
        same = True
        self._bare = None
        start = len(self.runs)
        for r in range(c.repeats):
            k = r % len(c.modes)
            order = c.modes[k:] + c.modes[:k]  # round r starts at mode r: every mode runs in every position
            for position, mode in enumerate(order):
                outputs = self._mode(mode, prompts, greedy, oracle, width, batch)
                if outputs is False:
                    break
                if c.repeats > 1:
                    self.runs[-1] |= {"round": r, "position": position}
                if outputs is not None:
                    same = same and tokens_by_mode.setdefault(mode, outputs) == outputs  # every round decodes alike
            else:
                continue
            break
        if c.repeats > 1:
            self.runs[start:] = fold_rounds(self.runs[start:], c.modes)
        first = next(iter(tokens_by_mode.values()), None)
        same = same and all(v == first for v in tokens_by_mode.values())
        self.checks.append({"depth": width - 1, "batch": batch, "modes_agree": same})
        for row in self.runs[start:]:
            row["modes_agree"] = same

    def _engine(self, mode: str, oracle, width: int, batch: int, rank_check=None):
        c = self.config
        mix = AcceptanceMix(c.acceptance, oracle, c.model.vocab_size, seed=c.seed) if oracle is not None else None
        return self.kind.engine(
            self.model,
            self.head,
            mode=mode,
            width=width,
            batch=batch,
            block_size=c.block_size,
            block_table_width=c.block_table_width,
            library=self.library,
            acceptance=mix,
            rank_check=rank_check,
            device_guard=c.device_guard,
            side_streams=c.side_streams,
            mapped_mirror=c.mapped_mirror,
            draft_at_end=c.draft_at_end,
            sampling=c.sampling_params(batch),
            draft_sampling=c.draft_sampling,
        )

    def _warm_up(self, prompts, oracle, width: int, batch: int) -> None:
        """An untimed run of each mode before its first timed one: what only a process's first run pays
        (loading kernels, first calls, allocator growth) stays out of the timed steps."""
        todo = [m for m in self.config.modes if m not in self._warmed]
        for mode in todo:
            self._warmed.add(mode)
            eng = self._engine(mode, oracle, width, batch)
            try:
                eng.run(prompts, steps=1, warmup_steps=self.config.warmup)
            except (EngineError, RuntimeError):
                pass  # the timed run of this mode meets it again and reports it
            finally:
                eng.close()

    def _mode(self, mode: str, prompts, greedy, oracle, width: int, batch: int):
        """One timed run; its outputs, None when it failed, False when the device is lost."""
        c = self.config
        eng = self._engine(mode, oracle, width, batch, self.rank_check)
        t, what = time.perf_counter(), f"[{self.done + 1}/{self.total}] depth {width - 1} batch {batch} {mode}"
        try:
            with still_running(what), settled(c.cuda):
                res = eng.run(prompts, steps=c.steps, warmup_steps=c.warmup, timing=True)
        except EngineError as e:  # e.g. the ranks' states differ (--check-ranks): every rank stops here
            eng.close()
            raise BenchError(str(e)) from None
        except RuntimeError as e:  # a device failure in one run: record it, keep the others
            self.done += 1
            why = error_text(e)
            log(f"bench: [{self.done}/{self.total}] depth {width - 1} batch {batch} {mode}: FAILED: {why}")
            self.runs.append(_failed(mode, width, batch, why))
            eng.close()
            return None if self._device_ok() else False
        if self._bare is None:
            self._bare = bare_spans(eng, c.bare_repeats)
            self.host_clock.measure(eng)  # before any profiler has run in this process (bench/host_clock.py)
        eng.close()
        self.host_clock.turnaround(mode, batch, res.host_turnaround_us)  # unprofiled: a timed run's own clock
        row = {"draft": c.draft, **summary(res, self._bare)}
        if oracle is not None and c.sampling is None:  # a sampled run follows its own drafts' draws
            row["equals_target_reference"] = all(o == g[: len(o)] for o, g in zip(res.outputs, oracle.tolist()))
        if greedy is not None:
            row["equals_greedy"] = all(o == g[: len(o)] for o, g in zip(res.outputs, greedy))
        self.runs.append(row)
        self.done += 1
        tpot = "no timed token" if row["tpot_ms"] is None else f"TPOT {row['tpot_ms']} ms"
        log(
            f"bench: [{self.done}/{self.total}] depth {width - 1} batch {batch} {mode}: {tpot}, "
            f"acceptance {row['acceptance']}, {time.perf_counter() - t:.1f}s{self._left()}"
        )
        return res.outputs

    def _result(self) -> dict:
        c = self.config
        for r in self.runs:
            r.setdefault("draft", c.draft)
            r.setdefault("tp", c.tp)
        env = {
            "device": torch.cuda.get_device_name(c.device) if c.cuda else platform.processor() or "cpu",
            "torch": torch.__version__,
            "python": platform.python_version(),
            "clock": "cuda-events" if c.cuda else "host perf_counter",
            "kernel_clock": "torch.profiler (CUPTI)" if c.cuda and c.profile_steps else None,
            "switches": switches(),
        }
        return {
            "command": c.command,
            "model": c.model_path or c.model.name,
            "draft": c.draft,
            "draft_weights": c.draft_weights,
            "draft_from_checkpoint": getattr(self.head, "from_checkpoint", False),  # the checkpoint's mtp.* tensors
            "dtype": str(c.dtype).split(".")[-1],
            "tp": c.tp,
            "draft_tp": c.draft_tp,
            "environment": env,
            "layout": {"block_size": c.block_size, "block_table_width": c.block_table_width},
            "steps": c.steps,
            "warmup_steps": c.warmup,
            "profile_steps": c.profile_steps,
            "repeats": c.repeats,  # timed runs per mode, depth and batch (each row: the median-TPOT one; "rounds")
            "device_guard": c.device_guard,  # False: --no-device-guard (the runtime modes without the device guard)
            "side_streams": c.side_streams,  # False: --no-side-streams (specgen's step graphs on one stream)
            "mapped_mirror": c.mapped_mirror,  # True: the host fields through mapped memory (--mapped-mirror)
            "draft_at_end": c.draft_at_end,  # a block draft at the end of specgen's step graph (--own-draft-graph: off)
            "settled": SETTLED,  # what every timed and profiled run starts from (bench/support.py)
            "acceptance_p": c.acceptance,
            "draft_vocab": None if c.draft_vocab is None else self.head.draft_vocab.size,  # ids the draft keeps
            "sampling": (
                dict(zip(("temperature", "top_k", "top_p"), c.sampling), draft_sampling=c.draft_sampling)
                if c.sampling
                else None
            ),
            "aborted": self.aborted,
            "skipped_modes": dict(c.skipped),
            "runs": self.runs,
            "agreement": self.checks,
            "ratios": ratios(self.runs),
        }
