"""What the bench harness needs besides measuring: its log, the device check, progress, noise figures, a
stderr without the profiler's trace-point lines and a settled process before each measured run."""

from __future__ import annotations

import gc
import json
import os
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where it is used: the CLI's parser reads the settings without it
    import torch

    from ..models.qwen3 import ModelConfig
    from ..models.qwen3_5_config import Qwen35Config

__all__ = [
    "CPU_PRESETS",
    "MODEL_PRESETS",
    "BenchError",
    "check_device",
    "check_model",
    "create_target",
    "fitting_model_config",
    "hybrid",
    "kernel_boundaries",
    "load_target",
    "model_config",
    "tp_problem",
    "log",
    "quarters",
    "quiet_profiler",
    "settled",
    "SETTLED",
    "skipped_modes",
    "still_running",
]

# the trace-point lines kineto (torch.profiler) writes to stderr around every profiling session
PROFILER_NOISE = (b"USDT:", b"STAGE:")
# the presets' names, without importing torch here: models.qwen3.PRESETS, then models.qwen3_5_config.PRESETS
QWEN3_PRESETS = ("tiny", "qwen3-0.6b", "qwen3-8b")
QWEN35_PRESETS = ("qwen3.5-tiny", "qwen3.5-0.8b", "qwen3.5-2b")
MODEL_PRESETS = QWEN3_PRESETS + QWEN35_PRESETS
CPU_PRESETS = ("tiny", "qwen3.5-tiny")  # sized for the CPU: float32 under --dtype auto, no size warning


class BenchError(Exception):
    """A configuration the bench cannot run (one line for the CLI)."""


def log(msg: str) -> None:
    if os.environ.get("RANK", "0") == "0":  # tensor-parallel runs: rank 0 reports progress
        print(msg, file=sys.stderr, flush=True)


def switches() -> dict[str, str]:
    """The ``SPECGEN_*`` variables a run saw (the kernel choices' switches, e.g. ``SPECGEN_SKINNY_TALL=0``), so that
    a results file says which variant it measured; the test suite's ``SPECGEN_TEST_*`` are left out."""
    env = sorted(os.environ.items())
    return {k: v for k, v in env if k.startswith("SPECGEN_") and not k.startswith("SPECGEN_TEST_")}


def check_device(name: str | None) -> torch.device:
    """``--device``: cpu or cuda[:n], checked here, before anything is built or run."""
    import torch

    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError):
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        raise BenchError(f"--device {name}: use cpu or cuda (or cuda:N)")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise BenchError(f"--device {name}: torch sees no CUDA device here; use --device cpu")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise BenchError(f"--device {name}: there are {torch.cuda.device_count()} CUDA device(s)")
    return dev


def check_model(model: str) -> str | None:
    """A preset, or a folder holding a Hugging Face ``config.json``."""
    if model in MODEL_PRESETS:
        return None
    path = Path(model)
    if path.is_dir():
        return None if (path / "config.json").is_file() else f"--model {model}: the folder has no config.json"
    return f"unknown --model '{model}' (known: {', '.join(MODEL_PRESETS)}; or a Hugging Face Qwen3 or Qwen3.5 folder)"


def is_qwen35_config(config: dict) -> bool:
    """Whether a ``config.json`` is a Qwen3.5 one (``model_type`` qwen3_5..., or a ``text_config``)."""
    return str(config.get("model_type", "")).startswith("qwen3_5") or "text_config" in config


def model_config(model: str) -> "ModelConfig | Qwen35Config":
    """The preset's config, or the folder's ``config.json`` through the Qwen3 or the Qwen3.5 loader (a field
    it does not honour is a ``BenchError`` naming it)."""
    from ..models.qwen3 import ModelConfig
    from ..models.qwen3_5_config import Qwen35Config

    if model in QWEN3_PRESETS:
        return ModelConfig.preset(model)
    if model in QWEN35_PRESETS:
        return Qwen35Config.preset(model)
    path = Path(model) / "config.json"
    try:
        config = json.loads(path.read_text())
        if not isinstance(config, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        raise BenchError(f"--model {model}: {path}: cannot read it ({e})") from None
    try:
        if is_qwen35_config(config):
            return Qwen35Config.from_hf_dict(config, Path(model).name)
        return ModelConfig.from_hf_dict(config, Path(model).name)
    except (ValueError, TypeError) as e:
        raise BenchError(f"--model {model}: {e}") from None


def hybrid(config) -> bool:
    """Whether a model config is a hybrid target's (it names its layers' kinds: linear-attention state)."""
    return bool(getattr(config, "layer_types", ()))


def skipped_modes(modes: tuple[str, ...], draft: str, cuda: bool) -> tuple[tuple[str, str], ...]:
    """``(mode, why)`` for each of ``modes`` that cannot run: it needs CUDA here, or the draft kind has none."""
    from ..engine.draft_kinds import DRAFT_KINDS
    from ..engine.modes import MODES

    skipped = tuple((m, MODES[m].cpu_skip_reason) for m in modes if not cuda and MODES[m].cpu_skip_reason)
    kind_modes = DRAFT_KINDS[draft].modes
    return skipped + tuple(
        (m, f"the {draft} draft has no {m} mode") for m in modes if m not in kind_modes and m not in dict(skipped)
    )


def fitting_model_config(model: str, positions: int) -> "ModelConfig | Qwen35Config":
    """``model_config``, checked to hold sequences of ``positions`` (a checkpoint's ``max_position_embeddings``)."""
    config = model_config(model)
    if config.max_positions is not None and positions > config.max_positions:
        raise BenchError(
            f"--model {model}: a sequence may reach {positions} positions (--prompt-len, --steps, --warmup, "
            f"--profile-steps, --depth), beyond its max_position_embeddings {config.max_positions}"
        )
    return config


def tp_problem(config, size: int) -> str | None:
    """Why the target of ``config`` cannot run over ``size`` tensor-parallel ranks, or None.

    A hybrid target needs ``models/tp.py`` to shard its linear-attention layers (``shards_hybrid_targets``);
    otherwise the shares must divide evenly (``shard_problem``).
    """
    from ..models import tp

    if hybrid(config) and not getattr(tp, "shards_hybrid_targets", False):
        return "linear-attention (Gated DeltaNet) layers are not split over tensor-parallel ranks yet; use --tp 1"
    return tp.shard_problem(config, size)


def kernel_boundaries(boundaries: tuple[str, ...], config, sampling: bool = False) -> tuple[str, ...]:
    """A draft kind's plans (``DraftKind.boundaries``) for the target of ``config``: a hybrid target's
    draft-to-verify head is ``draft-to-verify-linear`` (its linear state's slots join the head); a sampling
    run's tail is the sampled one (``verify-to-draft-sampled``, ``context-kv-sampled``)."""
    from ..specializations.plan import DRAFT_TO_VERIFY, LINEAR_DRAFT_TO_VERIFY, SAMPLED_TAILS

    if sampling:
        boundaries = tuple(SAMPLED_TAILS.get(b, b) for b in boundaries)
    if not hybrid(config):
        return boundaries
    return tuple(LINEAR_DRAFT_TO_VERIFY if b == DRAFT_TO_VERIFY else b for b in boundaries)


def create_target(config, path: str | None, seed: int, dtype, device) -> torch.nn.Module:
    """The target ``config`` describes (``Qwen35Model`` for a hybrid config, else ``Qwen3Model``): the folder
    ``path``'s weights in ``dtype``, or seeded random ones (``path`` None)."""
    from ..models import Qwen3Model, Qwen35Model

    cls = Qwen35Model if hybrid(config) else Qwen3Model
    if path is None:
        return cls.create(config, seed=seed, dtype=dtype, device=device)
    try:
        return cls.from_pretrained(path, dtype=dtype, device=device)
    except (KeyError, ValueError, FileNotFoundError) as e:
        raise BenchError(f"--model {path}: {str(e).strip(chr(34) + chr(39))}") from None


def restrict_draft(draft: torch.nn.Module, target: torch.nn.Module, spec: str | None) -> None:
    """``--draft-vocab spec`` on ``draft`` (the target's LM head over a count of ids or a JSON file's ids;
    ``models.draft_vocab``); nothing for None. A bad subset is a ``BenchError`` naming the option."""
    if spec is None:
        return
    from ..models.draft_vocab import apply_draft_vocab, parse_draft_vocab

    try:
        apply_draft_vocab(draft, target.lm_head_weight, parse_draft_vocab(spec))
    except ValueError as e:
        raise BenchError(f"--draft-vocab: {e}") from None


def load_target(config, device) -> torch.nn.Module:
    """The bench's target: the folder's weights in the bench's dtype, or the preset with seeded random ones."""
    return create_target(config.model, config.model_path, config.seed, config.dtype, device)


class still_running:  # noqa: N801  used as ``with still_running("what"):``
    """While the block runs, a line every ``every`` seconds says it is still running (a slow CPU run), through
    ``report`` (default: the bench log)."""

    def __init__(self, what: str, every: float = 30.0, report=None):
        self.what, self.every = what, every
        self.report = report if report is not None else (lambda msg: log(f"bench: {msg}"))
        self._stop = threading.Event()

    def _beat(self) -> None:
        t0 = time.perf_counter()
        while not self._stop.wait(self.every):
            self.report(f"{self.what}: still running, {time.perf_counter() - t0:.0f}s so far")

    def __enter__(self):
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def quarters(timings) -> list[float]:
    """Mean step time (draft + verify span + gap) over each quarter of the timed steps, to see the noise."""
    steps = [x.draft_us + x.verify_span_us + (x.gap_us if x.gap_us == x.gap_us else 0.0) for x in timings[:-1]]
    n = min(4, len(steps))
    parts = [steps[i * len(steps) // n : (i + 1) * len(steps) // n] for i in range(n)]
    return [round(sum(p) / len(p), 2) for p in parts if p]


@contextmanager
def quiet_profiler():
    """While the block runs, this process's stderr (fd 2) goes to a file; afterwards its lines are written
    back, but for kineto's trace-point lines (``PROFILER_NOISE``: ``USDT: ... profiler_start`` and the like).

    Every other line (a warning, an error, the bench's own progress) comes back in order.  With
    ``KINETO_LOG_LEVEL`` set (someone asked kineto for its log) nothing is held back.
    """
    if "KINETO_LOG_LEVEL" in os.environ:
        yield
        return
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to redirect
        yield
        return
    with tempfile.TemporaryFile() as held:
        sys.stderr.flush()
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [ln for ln in held.read().splitlines(keepends=True) if not ln.startswith(PROFILER_NOISE)]
            if kept:
                os.write(2, b"".join(kept))


SETTLED = (
    "before each timed and each profiled run: a full garbage collection and the CUDA caching allocator's "
    "unused blocks released; no collection during the run"
)


@contextmanager
def settled(cuda: bool):
    """A measured run that starts from the same process state whatever ran before it in the process (``SETTLED``).

    What an earlier mode leaves behind (a larger heap after ``torch.compile``, the reserved blocks of closed
    engines' graph pools) would otherwise show in a later mode's figures: a collection that falls between two
    graph replays is a host pause inside a boundary.  The collector's state is restored afterwards.
    """
    gc.collect()
    if cuda:
        import torch

        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
