"""``specgen bench``'s settings, spelled once.

Every field of ``BenchSettings`` carries, in its ``dataclasses.field``
metadata (an ``Option``), its command-line option, help text, how the
option's text is read and the checks of its value.  ``specgen bench``'s
arguments are generated from these fields (``cli/bench.py``), and
``BenchSettings.resolve`` runs their checks and turns the settings into the
resolved ``BenchConfig`` (``BenchError`` says what is wrong).  The registries
the checks read (``engine.modes.MODES``, ``engine.draft_kinds.DRAFT_KINDS``)
are read when they run, so a mode registered after this module was imported
is known.  Nothing heavy is imported here at import time: the CLI builds its
parser from these fields without loading torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from . import support
from .config_checks import (
    BLOCKS_MESSAGE,
    COUNTS_MESSAGE,
    _at_least,
    _choices,
    _device,
    _draft,
    _draft_sampling,
    _draft_vocab,
    _modes,
    _positions,
    _ranks,
    _sampling_check,
    _temperature,
    _top_k,
    _top_p,
    _tp_message,
    _values,
    _weights,
    _widths,
    first_problem,
)
from .support import CPU_PRESETS, MODEL_PRESETS, BenchError, check_model, fitting_model_config

if TYPE_CHECKING:
    import torch

    from ..models.qwen3 import ModelConfig
    from ..models.qwen3_5_config import Qwen35Config

__all__ = ["BenchConfig", "BenchSettings", "Option", "configure", "options"]

# how an option's text is read on the command line
TEXT, INT, FLOAT, INTS, NAMES, SWITCH = "text", "int", "float", "ints", "names", "switch"
DTYPES = ("auto", "float32", "bfloat16")
DRAFT_SAMPLING = ("sample", "argmax")  # engine.sampling.DRAFT_SAMPLING, without loading torch for the parser
OWN_GRAPH_MTP = "--own-draft-graph is for a block draft (dflash, dspark): the mtp draft runs at the step graph's head"

Check = Callable[[Any], "str | None"]  # a value -> what is wrong with it (the BenchError's message), or None
Relation = Callable[[Any, "BenchSettings"], "str | None"]  # the same, reading the other settings too


@dataclass(frozen=True)
class Option:
    """How one setting reads on the command line, and what makes its value bad."""

    help: str
    flag: str = ""  # the option; "" is --<field name, dashed>
    text: str = TEXT  # how the option's text is read: TEXT, INT, FLOAT, INTS (4,5 or 2-16), NAMES, SWITCH
    metavar: str | None = None
    choices: tuple[str, ...] | None = None  # the parser's choices (the value is checked against them too)
    check: Check | None = None  # this value alone
    relation: Relation | None = None  # this value against the others (run once every ``check`` passed)


def setting(default, help: str, **option) -> Any:
    """A ``BenchSettings`` field: its default and its ``Option``."""
    return field(default=default, metadata={"option": Option(help, **option)})


def draft_sampling_setting() -> Any:
    """``--draft-sampling`` (``bench`` and ``serve-bench``): how a sampling MTP draft proposes."""
    return setting(
        "sample",
        "with --temperature > 0: the MTP draft draws from its own filtered distribution (sample), or proposes "
        "its argmax (argmax: one-hot, no vocabulary pass per drafted token; a draft is kept with probability p(x))",
        choices=DRAFT_SAMPLING,
        check=_choices(DRAFT_SAMPLING, "--draft-sampling"),
        relation=_draft_sampling,
    )


def draft_vocab_setting() -> Any:
    """``--draft-vocab`` (``bench`` and ``serve-bench``): the draft's reduced vocabulary."""
    return setting(
        None,
        "the draft's LM head over the first N token ids, or over the ids a JSON file lists (a reduced draft "
        "vocabulary: drafts only from those ids; verification keeps the whole head)",
        metavar="N|FILE",
        check=_draft_vocab,
    )


@dataclass(frozen=True)
class BenchSettings:
    """What one ``specgen bench`` is asked to run, as given (``resolve`` validates it into a ``BenchConfig``).

    The fields' order is the order of ``specgen bench --help``.
    """

    model: str = setting(
        "tiny",
        f"a model preset with random weights ({', '.join(MODEL_PRESETS)}), or a local Hugging Face Qwen3 or "
        "Qwen3.5 folder (config.json and *.safetensors)",
        metavar="PRESET|DIR",
        check=check_model,
    )
    depths: tuple[int, ...] = setting(
        (3,),
        "drafts per step (verify width = depth + 1), e.g. 3 or 3,4,5",
        flag="--depth",
        text=INTS,
        check=_values,
        relation=_widths,
    )
    draft: str = setting("mtp", "draft kind: mtp (default), dflash or dspark", check=_draft)
    draft_weights: str | None = setting(
        None,
        "a DFlash / DSpark draft from a local safetensors folder (default: random weights)",
        metavar="DIR",
        relation=_weights,
    )
    batches: tuple[int, ...] = setting((1,), "batch sizes, e.g. 1,8,32", flag="--batch", text=INTS, check=_values)
    steps: int = setting(32, "timed decode steps per run", text=INT, check=_at_least(1, "--steps must be at least 1"))
    warmup: int = setting(
        3,
        "untimed steps first (capture, compilation)",
        text=INT,
        check=_at_least(1, "--warmup must be at least 1 (the first step of every run captures its graphs)"),
    )
    modes: tuple[str, ...] | None = setting(
        None, "registered boundary modes, comma-separated (default: every one)", text=NAMES, check=_modes
    )
    acceptance: float | None = setting(
        None,
        "drafts agree with the target with probability p (default: the MTP head's own drafts)",
        text=FLOAT,
        check=lambda p: None if p is None or 0.0 <= p <= 1.0 else f"--acceptance must lie in [0, 1], got {p}",
    )
    temperature: float = setting(
        0.0,
        "sampled verification at this temperature (speculative rejection sampling; 0: greedy verification)",
        text=FLOAT,
        check=_temperature,
    )
    top_k: int = setting(0, "sampling keeps the k most probable tokens (0: every token)", text=INT, check=_top_k)
    top_p: float = setting(
        1.0, "sampling keeps the most probable tokens of mass p (1: every token)", text=FLOAT, check=_top_p
    )
    draft_sampling: str = draft_sampling_setting()
    draft_vocab: str | None = draft_vocab_setting()
    check: bool = setting(
        False, "also compare every mode with plain greedy decoding", text=SWITCH, relation=_sampling_check
    )
    block_size: int = setting(16, "KV cache positions per block", text=INT, check=_at_least(1, BLOCKS_MESSAGE))
    block_table_width: int = setting(
        32, "blocks per sequence (0: just enough)", text=INT, check=_at_least(0, BLOCKS_MESSAGE), relation=_positions
    )
    prompt_len: int = setting(
        32, "longest prompt; lengths vary down to half", text=INT, check=_at_least(1, COUNTS_MESSAGE)
    )
    dtype: str = setting(
        "auto",
        "auto: bfloat16 on CUDA (but for the tiny presets), else float32",
        choices=DTYPES,
        check=_choices(DTYPES, "--dtype"),
    )
    device: str | None = setting(None, "cpu or cuda (default: cuda when available)", check=_device)
    seed: int = setting(0, "seed of weights, prompts, acceptance draws, sampling (row b: seed + b)", text=INT)
    bare_repeats: int = setting(
        30, "draft + bare verify replays timed for the boundary figures", text=INT, check=_at_least(1, COUNTS_MESSAGE)
    )
    repeats: int = setting(
        1,
        "timed runs of every mode per batch and depth, the modes' order rotated each round (round r starts at "
        "mode r); each row is the run of median TPOT, its rounds listed beside it",
        text=INT,
        check=_at_least(1, "--repeats must be at least 1 (1: one timed run of each mode)"),
    )
    tp: int = setting(
        1,
        "tensor-parallel ranks of the target, one process per device (NCCL on GPUs, gloo on the CPU); "
        "launched here unless run under torchrun",
        text=INT,
        relation=lambda tp, s: _tp_message(s) if tp < 1 else _ranks(tp, s),
    )
    draft_tp: int = setting(
        1,
        "1: the MTP draft body whole on every rank; or --tp",
        text=INT,
        relation=lambda d, s: None if d in (1, s.tp) else _tp_message(s),
    )
    check_ranks: int = setting(
        0,
        "compare the ranks' step state every N steps; stop at the first differing field",
        text=INT,
        metavar="N",
        relation=lambda n, s: _tp_message(s) if n < 0 else None,
    )
    profile_steps: int = setting(
        8,
        "after the timed runs, profile this many steps of each run with torch.profiler for the kernel-level "
        "figures and the cost model's calibration costs.json (the CPU: baseline runs, host compute only; 0: off)",
        text=INT,
        check=_at_least(0, "--profile-steps must be at least 0 (0: no kernel-level profile)"),
    )
    no_device_guard: bool = setting(
        False, "run the verify graphs without the device guard (its cost as an A/B; recorded)", text=SWITCH
    )
    no_side_streams: bool = setting(
        False,
        "capture specgen's step graphs on one stream: the device guard and the hoisted head in line, the host "
        "copies on the step's stream (an A/B of the side streams' cost; recorded)",
        text=SWITCH,
    )
    mapped_mirror: bool = setting(
        False,
        "specgen's step graphs write the host fields through mapped pinned memory with side streams too (no copy "
        "stream, no event wait node; one stream always does); recorded",
        text=SWITCH,
    )
    own_draft_graph: bool = setting(
        False,
        "a block draft (dflash, dspark) keeps its own graph before specgen's step graph instead of drafting for the "
        "next step at its end (an A/B of the graph switch after the verification; recorded as draft_at_end)",
        text=SWITCH,
        relation=lambda on, s: OWN_GRAPH_MTP if on and s.draft == "mtp" else None,
    )

    @property
    def positions_needed(self) -> int:
        """KV positions a sequence needs: the prompt, every run's steps (timed and profiled), the oracle's."""
        widest = max(d + 1 for d in self.depths)
        need = self.prompt_len + (self.warmup + max(self.steps, self.profile_steps) + 2) * widest + 1
        if self.acceptance is not None:  # the oracle run decodes max_new_tokens, which reserves 3 W + 1 more
            need += 3 * widest + 1
        return need

    def problem(self) -> str | None:
        """What is wrong with these settings (the first thing found), or None.

        Every field's ``check`` runs first, in field order; then, once every
        value is good on its own, every ``relation``.
        """
        return first_problem(self, options())

    def resolve(self, command: str = "specgen bench") -> "BenchConfig":
        """The validated ``BenchConfig`` (``BenchError`` says what is wrong); ``command`` is what was run."""
        why = self.problem()
        if why:
            raise BenchError(why)
        import torch

        from ..engine.draft_kinds import draft_kind
        from ..engine.modes import MODES
        from .support import check_device, skipped_modes

        dev = check_device(self.device)
        cuda = dev.type == "cuda"
        modes = tuple(MODES) if self.modes is None else tuple(self.modes)
        skipped = skipped_modes(modes, self.draft, cuda)
        trails = draft_kind(self.draft).proposer_class.can_trail  # at the end of specgen's step graph, side streams on
        torch_dtype = {
            "auto": torch.bfloat16 if cuda and self.model not in CPU_PRESETS else torch.float32,
            "float32": torch.float32,
            "bfloat16": torch.bfloat16,
        }[self.dtype]
        return BenchConfig(
            model=fitting_model_config(self.model, self.positions_needed),
            model_path=None if self.model in MODEL_PRESETS else str(Path(self.model).resolve()),
            dtype=torch_dtype,
            device=dev,
            depths=tuple(self.depths),
            batches=tuple(self.batches),
            modes=tuple(m for m in modes if m not in dict(skipped)),
            skipped=skipped,
            steps=self.steps,
            warmup=self.warmup,
            acceptance=self.acceptance,
            sampling=(self.temperature, self.top_k, self.top_p) if self.temperature > 0 else None,
            draft_sampling=self.draft_sampling,
            draft_vocab=self.draft_vocab,
            check=self.check,
            block_size=self.block_size,
            block_table_width=self.block_table_width or -(-self.positions_needed // self.block_size),
            prompt_len=self.prompt_len,
            seed=self.seed,
            bare_repeats=self.bare_repeats,
            repeats=self.repeats,
            command=command,
            draft=self.draft,
            draft_weights=self.draft_weights,
            tp=self.tp,
            draft_tp=self.draft_tp,
            check_ranks=self.check_ranks,
            profile_steps=self.profile_steps,
            device_guard=not self.no_device_guard,
            side_streams=not self.no_side_streams,
            mapped_mirror=self.mapped_mirror or self.no_side_streams,
            draft_at_end=trails and not self.no_side_streams and not self.own_draft_graph,
        )


def options() -> list[tuple[str, Any, Option]]:
    """``(field name, default, Option)`` of every setting, in field order."""
    return [(f.name, f.default, f.metadata["option"]) for f in fields(BenchSettings)]


def configure(*, command: str = "specgen bench", **settings) -> "BenchConfig":
    """``BenchSettings(**settings).resolve(command)``; ``block_table_width=0``: just enough."""
    return BenchSettings(**settings).resolve(command)


@dataclass(frozen=True)
class BenchConfig:
    """Everything one bench invocation runs with, validated by ``BenchSettings.resolve``."""

    model: ModelConfig | Qwen35Config  # a Qwen3 target's, or a hybrid (Qwen3.5-style) target's
    dtype: torch.dtype
    device: torch.device
    depths: tuple[int, ...]
    batches: tuple[int, ...]
    modes: tuple[str, ...]  # the modes that run here
    skipped: tuple[tuple[str, str], ...]  # (mode, why) asked for but not run here
    steps: int
    warmup: int
    acceptance: float | None
    check: bool
    block_size: int
    block_table_width: int
    prompt_len: int
    seed: int
    bare_repeats: int
    command: str
    repeats: int = 1  # timed runs of every mode per (depth, batch), in rotated order; rows: the median-TPOT run
    draft: str = "mtp"  # a registered draft kind (draft_kinds.DRAFT_KINDS)
    model_path: str | None = None  # a Hugging Face folder whose weights load (None: the preset's random ones)
    draft_weights: str | None = None  # a local safetensors folder for a block draft
    tp: int = 1  # tensor-parallel ranks of the target
    draft_tp: int = 1  # 1: the MTP draft body whole on every rank; tp: split like the target
    check_ranks: int = 0  # compare the ranks' step state every N steps (0: off)
    profile_steps: int = 0  # steps profiled per run after every timed run (the CPU: host-serial runs; 0: none)
    device_guard: bool = True  # False: the runtime modes' verify graphs run without the device guard
    side_streams: bool = True  # False: specgen's step graphs on one stream (--no-side-streams)
    mapped_mirror: bool = False  # True: the host fields through mapped memory (--mapped-mirror, or one stream)
    draft_at_end: bool = False  # a block draft at the end of specgen's step graph (the default; --own-draft-graph)
    sampling: tuple[float, int, float] | None = None  # (temperature, top_k, top_p); None: greedy verification
    draft_sampling: str = "sample"  # a sampling MTP draft draws from its own q, or proposes its argmax (one-hot)
    draft_vocab: str | None = None  # the draft's reduced vocabulary: a count of ids or a JSON file of ids

    def sampling_params(self, batch: int):
        """Each row's ``SamplingParams`` (row ``b`` seeded ``seed + b``), or None for greedy verification."""
        if self.sampling is None:
            return None
        from ..runtime.sampling import SamplingParams

        return [SamplingParams(*self.sampling, seed=self.seed + b) for b in range(batch)]

    @property
    def model_label(self) -> str:
        """What the results record as the model: the preset's name or the checkpoint folder."""
        return self.model_path or self.model.name

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def widths(self) -> tuple[int, ...]:
        return tuple(sorted({d + 1 for d in self.depths}))

    @property
    def kernel_target(self) -> str:
        """The build target whose kernels the library must hold."""
        return "cuda" if self.cuda else "c"

    @property
    def needs_library(self) -> bool:
        from ..engine.draft_kinds import DRAFT_KINDS

        return any(DRAFT_KINDS[self.draft].modes[m].needs_library for m in self.modes)

    @property
    def boundaries(self) -> tuple[str, ...]:
        """The plans the draft kind's specgen mode runs over this target (what the kernel build must hold)."""
        from ..engine.draft_kinds import DRAFT_KINDS

        return support.kernel_boundaries(DRAFT_KINDS[self.draft].boundaries, self.model, self.sampling is not None)
