"""``specgen serve-bench``'s settings, spelled once (as ``config.py`` spells ``specgen bench``'s).

Every field of ``ServeSettings`` carries its option, help text, how its text
is read and the checks of its value (an ``Option``); the command's arguments
are generated from these fields (``cli/serve_bench.py``) and
``ServeSettings.resolve`` turns them into a ``ServeConfig`` or raises
``BenchError`` with one line naming the option.  Lengths are distributions::

    >>> length_dist("uniform:8-32", "--prompt-len")
    LengthDist(kind='uniform', low=8, high=32, median=0.0, sigma=0.0)
    >>> rate_list("1,2.5,inf")
    (1.0, 2.5, None)
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..specializations.families import MAX_WIDTH
from . import support
from .config import (
    DTYPES,
    FLOAT,
    INT,
    NAMES,
    SWITCH,
    _choices,
    _device,
    _draft,
    _modes,
    draft_sampling_setting,
    draft_vocab_setting,
    first_problem,
    setting,
)
from .config_checks import _ranks, _temperature, _top_k, _top_p, _tp_message
from .serve_parse import LENGTH_FORMS, _at_least, _reads, _stop_ids, length_dist, rate_list
from .support import CPU_PRESETS, MODEL_PRESETS, BenchError, check_model, fitting_model_config

if TYPE_CHECKING:  # torch (and the engine) load where used: the parser reads these fields without them
    import torch

    from ..engine.serving.workload import LengthDist

__all__ = ["INTS_REPEATED", "Load", "ServeConfig", "ServeSettings", "length_dist", "rate_list", "serve_options"]

INTS_REPEATED = "ints-repeated"  # an option given once per value (--stop-id 2 --stop-id 7)


def _serve_tp(tp: int, s: ServeSettings) -> str | None:
    """Ranks schedule alike only when no request arrives by the clock (each rank has its own); MTP drafts and
    shapes that split, as for ``specgen bench --tp``."""
    if tp < 1:
        return _tp_message(s)
    if tp > 1 and s.rates and any(r is not None for r in rate_list(s.rates)):
        return (
            f"--tp {tp} serves --rates inf and --closed-loop only: requests arriving by each rank's own clock "
            "would be admitted at different steps on different ranks"
        )
    return _ranks(tp, s)


def _depth(depth: int, s: ServeSettings) -> str | None:
    if depth < 1:
        return f"--depth must be at least 1, got {depth}"
    if depth + 1 > MAX_WIDTH:
        return f"--depth {depth}: verify width {depth + 1} is beyond the kernel families' widths (at most {MAX_WIDTH})"
    return None


def _layout(bt: int, s: ServeSettings) -> str | None:
    """Every request fits its table and the pool, at its longest (prompt, output and one verify block)."""
    need = s.positions_needed
    if bt and bt * s.block_size < need:
        return (
            f"--block-table-width {bt} x --block-size {s.block_size} = {bt * s.block_size} positions; the longest "
            f"request needs {need} (--prompt-len + --output-len + --depth + 1; --block-table-width 0: just enough)"
        )
    blocks = -(-need // s.block_size)
    if s.num_blocks and s.num_blocks - 1 < blocks:
        return (
            f"--num-blocks {s.num_blocks}: the longest request needs {blocks} blocks of {s.block_size} and one "
            f"block is scratch; give at least {blocks + 1} (0: enough for --max-batch such requests)"
        )
    return None


@dataclass(frozen=True)
class ServeSettings:
    """What one ``specgen serve-bench`` is asked to run, as given; the fields' order is ``--help``'s."""

    model: str = setting(
        "tiny",
        f"a model preset with random weights ({', '.join(MODEL_PRESETS)}), or a local Hugging Face Qwen3 or "
        "Qwen3.5 folder",
        metavar="PRESET|DIR",
        check=check_model,
    )
    draft: str = setting("mtp", "draft kind: mtp (default), dflash or dspark", check=_draft)
    depth: int = setting(3, "drafts per step (verify width = depth + 1)", text=INT, relation=_depth)
    modes: tuple[str, ...] | None = setting(
        None,
        "boundary modes, comma-separated (default: every one that runs on the device; the serving loop runs all "
        "four, compile and inductor on CUDA only)",
        text=NAMES,
        check=_modes,
    )
    rates: str | None = setting(
        None,
        "request rates (requests/s, Poisson arrivals), comma-separated; inf: every request at once "
        "(default: inf unless --closed-loop is given)",
        metavar="R,R,...",
        check=_reads(rate_list),
    )
    closed_loop: int | None = setting(
        None,
        "also run a closed loop: N requests in flight, a new one when one finishes",
        text=INT,
        metavar="N",
        check=_at_least(1, "--closed-loop"),
    )
    num_requests: int = setting(16, "requests per run", text=INT, check=_at_least(1, "--num-requests"))
    prompt_len: str = setting(
        "uniform:8-32",
        f"prompt lengths: {LENGTH_FORMS}",
        metavar="DIST",
        check=_reads(lambda t: length_dist(t, "--prompt-len")),
    )
    output_len: str = setting(
        "uniform:8-32",
        f"output budgets: {LENGTH_FORMS}",
        metavar="DIST",
        check=_reads(lambda t: length_dist(t, "--output-len")),
    )
    stop_ids: tuple[int, ...] = setting(
        (),
        "a designated stop token id (repeat the option for more)",
        flag="--stop-id",
        text=INTS_REPEATED,
        metavar="ID",
        check=_stop_ids,
    )
    max_batch: int = setting(8, "sequences in the running batch at most", text=INT, check=_at_least(1, "--max-batch"))
    num_blocks: int = setting(
        0,
        "KV blocks in the pool, the scratch block included (0: enough for --max-batch of the longest requests)",
        text=INT,
        check=_at_least(0, "--num-blocks", " (0: enough)"),
    )
    block_size: int = setting(16, "KV cache positions per block", text=INT, check=_at_least(1, "--block-size"))
    block_table_width: int = setting(
        0,
        "blocks per sequence (0: just enough for the longest request)",
        text=INT,
        check=_at_least(0, "--block-table-width", " (0: just enough)"),
        relation=_layout,
    )
    profile_transitions: int = setting(
        0,
        "profile this many decode steps of one extra run of the first load per mode, after every timed run (a "
        "kernel trace): the device idle at batch transitions, in serve_bench.json and transition_idle.png (0: none)",
        text=INT,
        check=_at_least(0, "--profile-transitions"),
    )
    max_prefill_tokens: int = setting(
        256,
        "prompt tokens prefilled per step, over every chunk of the step",
        text=INT,
        check=_at_least(1, "--max-prefill-tokens"),
    )
    read_lag: int = setting(
        1,
        "steps between a step's launch and the host reading its tokens: 1 (the next step is launched first, as "
        "a device runs) or 0",
        text=INT,
        check=lambda n: None if n in (0, 1) else f"--read-lag must be 0 or 1, got {n}",
    )
    step_first: bool = setting(
        False,
        "each iteration launches its decode step before its prefill chunks (the device runs the step while "
        "the host launches the prefill)",
        text=SWITCH,
    )
    eager_prefill: bool = setting(
        False,
        "prefill chunks launched op by op (default on a GPU: chunks of up to 512 rows replay graphs captured "
        "per padded row count, engine/serving/prefill_graphs.py)",
        text=SWITCH,
    )
    acceptance: float | None = setting(
        None,
        "drafts agree with the target with probability p (default: the draft's own drafts)",
        text=FLOAT,
        check=lambda p: None if p is None or 0.0 <= p <= 1.0 else f"--acceptance must lie in [0, 1], got {p}",
    )
    temperature: float = setting(
        0.0,
        "requests sample at this temperature, verified by rejection sampling (0: greedy)",
        text=FLOAT,
        check=_temperature,
    )
    top_k: int = setting(0, "sampling keeps the k most probable tokens (0: every token)", text=INT, check=_top_k)
    top_p: float = setting(
        1.0, "sampling keeps the most probable tokens of mass p (1: every token)", text=FLOAT, check=_top_p
    )
    draft_sampling: str = draft_sampling_setting()
    draft_vocab: str | None = draft_vocab_setting()
    sampled_share: float = setting(
        1.0,
        "share of the requests that sample when --temperature > 0 (seeded; the others greedy)",
        text=FLOAT,
        check=lambda p: None if 0.0 <= p <= 1.0 else f"--sampled-share must lie in [0, 1], got {p}",
    )
    seed: int = setting(
        0, "seed of the weights, the workload and the acceptance draws; request i samples with seed + i", text=INT
    )
    tp: int = setting(
        1,
        "tensor-parallel ranks of the target, one process per device (NCCL on GPUs, gloo on the CPU); launched "
        "here unless run under torchrun; with --rates inf and --closed-loop (rank 0 reports)",
        text=INT,
        relation=_serve_tp,
    )
    draft_tp: int = setting(
        1,
        "1: the MTP draft body whole on every rank; or --tp",
        text=INT,
        relation=lambda d, s: None if d in (1, s.tp) else _tp_message(s),
    )
    device: str | None = setting(None, "cpu or cuda (default: cuda when available)", check=_device)
    dtype: str = setting(
        "auto",
        "auto: bfloat16 on CUDA (but for the tiny presets), else float32",
        choices=DTYPES,
        check=_choices(DTYPES, "--dtype"),
    )

    @property
    def positions_needed(self) -> int:
        """KV positions of the longest request: its prompt, its whole output budget and a verify block (two while
        a step is unread)."""
        p = length_dist(self.prompt_len, "--prompt-len")
        o = length_dist(self.output_len, "--output-len")
        return p.high + o.high + (1 + self.read_lag) * (self.depth + 1)  # an unread step: room for two

    def problem(self) -> str | None:
        """The first thing wrong with these settings: each value alone, then the relations between them."""
        return first_problem(self, serve_options())

    def resolve(self, command: str = "specgen serve-bench") -> ServeConfig:
        """The validated ``ServeConfig`` (``BenchError`` says what is wrong)."""
        why = self.problem()
        if why:
            raise BenchError(why)
        import torch

        from ..engine.modes import MODES
        from .support import check_device, skipped_modes

        dev = check_device(self.device)
        cuda = dev.type == "cuda"
        modes = tuple(MODES) if self.modes is None else tuple(self.modes)
        skipped = skipped_modes(modes, self.draft, cuda)
        model = fitting_model_config(self.model, self.positions_needed)
        bad = [i for i in self.stop_ids if i >= model.vocab_size]
        if bad:
            raise BenchError(f"--stop-id {bad[0]}: outside {model.name}'s vocabulary of {model.vocab_size} tokens")
        rates = rate_list(self.rates) if self.rates else (() if self.closed_loop else (None,))
        loads = tuple(Load(rate=r) for r in rates)
        if self.closed_loop:
            loads += (Load(in_flight=self.closed_loop),)
        blocks = -(-self.positions_needed // self.block_size)
        return ServeConfig(
            settings=self,
            model=model,
            model_path=None if self.model in MODEL_PRESETS else str(Path(self.model).resolve()),
            dtype={
                "auto": torch.bfloat16 if cuda and self.model not in CPU_PRESETS else torch.float32,
                "float32": torch.float32,
                "bfloat16": torch.bfloat16,
            }[self.dtype],
            device=dev,
            modes=tuple(m for m in modes if m not in dict(skipped)),
            skipped=skipped,
            loads=loads,
            prompt_len=length_dist(self.prompt_len, "--prompt-len"),
            output_len=length_dist(self.output_len, "--output-len"),
            block_table_width=self.block_table_width or blocks,
            num_blocks=self.num_blocks or self.max_batch * blocks + 1,
            command=command,
        )


def serve_options() -> list[tuple[str, Any, Any]]:
    """``(field name, default, Option)`` of every setting, in field order."""
    return [(f.name, f.default, f.metadata["option"]) for f in fields(ServeSettings)]


@dataclass(frozen=True)
class Load:
    """One load of the sweep: Poisson arrivals at ``rate`` requests/s, all at once (both None), or a closed
    loop of ``in_flight`` requests."""

    rate: float | None = None
    in_flight: int | None = None

    @property
    def label(self) -> str:
        if self.in_flight is not None:
            return f"closed {self.in_flight}"
        return "inf" if self.rate is None else f"{self.rate:g}/s"


@dataclass(frozen=True)
class ServeConfig:
    """Everything one ``specgen serve-bench`` runs with, validated by ``ServeSettings.resolve``."""

    settings: ServeSettings
    model: Any  # a ModelConfig or a Qwen35Config
    model_path: str | None
    dtype: torch.dtype
    device: torch.device
    modes: tuple[str, ...]  # the modes that run here
    skipped: tuple[tuple[str, str], ...]  # (mode, why) asked for but not run here
    loads: tuple[Load, ...]
    prompt_len: LengthDist
    output_len: LengthDist
    block_table_width: int  # resolved (0: just enough)
    num_blocks: int  # resolved (0: enough for max_batch of the longest requests)
    command: str

    def __getattr__(self, name: str):  # the settings as given: draft, depth, max_batch, seed, ...
        if name == "settings":
            raise AttributeError(name)
        return getattr(self.settings, name)

    @property
    def model_label(self) -> str:
        return self.model_path or self.model.name

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def widths(self) -> tuple[int, ...]:
        return (self.settings.depth + 1,)

    @property
    def kernel_target(self) -> str:
        return "cuda" if self.cuda else "c"

    @property
    def needs_library(self) -> bool:
        from ..engine.draft_kinds import DRAFT_KINDS

        return any(DRAFT_KINDS[self.settings.draft].modes[m].needs_library for m in self.modes)

    @property
    def boundaries(self) -> tuple[str, ...]:
        from ..engine.draft_kinds import DRAFT_KINDS

        return support.kernel_boundaries(DRAFT_KINDS[self.settings.draft].boundaries, self.model)

    def to_json(self) -> dict:
        """The settings as given and as resolved, for ``serve_bench.json``."""
        s = {f.name: getattr(self.settings, f.name) for f in fields(ServeSettings)}
        s.update(
            modes=list(self.modes),
            stop_ids=list(self.settings.stop_ids),
            loads=[load.label for load in self.loads],
            block_table_width=self.block_table_width,
            num_blocks=self.num_blocks,
            dtype=str(self.dtype).split(".")[-1],
            device=str(self.device),
            model=self.model_label,
        )
        return s
