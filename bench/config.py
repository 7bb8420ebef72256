"""``specgen bench``'s settings: ``configure`` validates them into a ``BenchConfig``
(``BenchError`` says what is wrong)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..engine.draft_kinds import DRAFT_KINDS
from ..engine.modes import MODES
from ..models.qwen3 import ModelConfig
from ..specializations.families import MAX_WIDTH
from .support import BenchError
from .support import check_device as _device

__all__ = ["BenchConfig", "configure"]


@dataclass(frozen=True)
class BenchConfig:
    """Everything one bench invocation runs with, validated by ``configure``."""

    model: ModelConfig
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
    draft: str = "mtp"  # a registered draft kind (draft_kinds.DRAFT_KINDS)
    draft_weights: str | None = None  # a local safetensors folder for a block draft
    tp: int = 1  # tensor-parallel ranks of the target
    draft_tp: int = 1  # 1: the MTP draft body whole on every rank; tp: split like the target
    check_ranks: int = 0  # compare the ranks' step state every N steps (0: off)
    profile_steps: int = 0  # steps profiled per run after every timed run (the CPU: host-serial runs; 0: none)

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
        return any(DRAFT_KINDS[self.draft].modes[m].needs_library for m in self.modes)

    @property
    def boundaries(self) -> tuple[str, ...]:
        """The plans the draft kind's specgen mode runs (what the kernel build must hold)."""
        return DRAFT_KINDS[self.draft].boundaries


def configure(
    *,
    model: str = "tiny",
    depths=(3,),
    batches=(1,),
    modes=tuple(MODES),
    steps: int = 32,
    warmup: int = 3,
    acceptance: float | None = None,
    check: bool = False,
    block_size: int = 16,
    block_table_width: int = 32,
    prompt_len: int = 32,
    dtype: str = "auto",
    device: str | None = None,
    seed: int = 0,
    bare_repeats: int = 30,
    command: str = "specgen bench",
    draft: str = "mtp",
    draft_weights: str | None = None,
    tp: int = 1,
    draft_tp: int = 1,
    check_ranks: int = 0,
    profile_steps: int = 8,
) -> BenchConfig:
    """Validate the bench settings (``BenchError`` says what is wrong); ``block_table_width=0``: just enough."""
    dev = _device(device)
    cuda = dev.type == "cuda"
    for m in modes:
        if m not in MODES:
            raise BenchError(f"unknown mode '{m}' (known: {', '.join(MODES)})")
    if not depths or not batches:
        raise BenchError("--depth and --batch need at least one value each")
    if any(d < 1 for d in depths) or any(b < 1 for b in batches):
        raise BenchError("--depth and --batch values must be at least 1")
    if block_size < 1 or block_table_width < 0:
        raise BenchError("--block-size must be at least 1 and --block-table-width at least 0 (0: just enough)")
    _check_draft(draft, draft_weights, depths, block_size, block_table_width)
    if warmup < 1:
        raise BenchError("--warmup must be at least 1 (the first step of every run captures its graphs)")
    if steps < 1:
        raise BenchError("--steps must be at least 1")
    if tp < 1 or draft_tp not in (1, tp) or check_ranks < 0:
        raise BenchError(f"--tp must be at least 1, --draft-tp 1 or --tp ({tp}), --check-ranks at least 0")
    if tp > 1 and draft != "mtp":
        raise BenchError(f"--tp {tp} runs MTP drafts; --draft {draft} runs on one device (--tp 1)")
    if prompt_len < 1 or bare_repeats < 1:
        raise BenchError("--prompt-len and --bare-repeats must be at least 1")
    if profile_steps < 0:
        raise BenchError("--profile-steps must be at least 0 (0: no kernel-level profile)")
    if acceptance is not None and not 0.0 <= acceptance <= 1.0:
        raise BenchError(f"--acceptance must lie in [0, 1], got {acceptance}")
    skipped = tuple((m, MODES[m].cpu_skip_reason) for m in modes if not cuda and MODES[m].cpu_skip_reason)
    kind_modes = DRAFT_KINDS[draft].modes
    skipped += tuple(
        (m, f"the {draft} draft has no {m} mode") for m in modes if m not in kind_modes and m not in dict(skipped)
    )
    cfg = ModelConfig.preset(model)
    torch_dtype = {
        "auto": torch.bfloat16 if cuda and model != "tiny" else torch.float32,
        "float32": torch.float32,
        "bfloat16": torch.bfloat16,
    }[dtype]
    widest = max(d + 1 for d in depths)
    need = prompt_len + (warmup + max(steps, profile_steps) + 2) * widest + 1
    if acceptance is not None:  # the oracle run decodes max_new_tokens, which reserves 3 W + 1 more
        need += 3 * widest + 1
    bt = block_table_width or -(-need // block_size)
    if bt * block_size < need:
        raise BenchError(
            f"--block-table-width {bt} x --block-size {block_size} = {bt * block_size} "
            f"positions; {steps} steps at depth {max(depths)} with --prompt-len {prompt_len} need "
            f"{need} (--block-table-width 0: just enough)"
        )
    return BenchConfig(
        cfg,
        torch_dtype,
        dev,
        tuple(depths),
        tuple(batches),
        tuple(m for m in modes if m not in dict(skipped)),
        skipped,
        steps,
        warmup,
        acceptance,
        check,
        block_size,
        bt,
        prompt_len,
        seed,
        bare_repeats,
        command,
        draft,
        draft_weights,
        tp,
        draft_tp,
        check_ranks,
        profile_steps,
    )


def _check_draft(draft: str, weights: str | None, depths, block_size: int, block_table_width: int) -> None:
    """The draft kind, its weights folder and its widths (``BenchError`` names what is wrong)."""
    if draft not in DRAFT_KINDS:
        raise BenchError(f"unknown --draft '{draft}' (known: {', '.join(DRAFT_KINDS)})")
    if weights is not None and draft == "mtp":
        raise BenchError("--draft-weights loads a DFlash or DSpark draft; use it with --draft dflash or dspark")
    widest = max(depths) + 1
    if block_table_width and widest > block_table_width * block_size:
        raise BenchError(
            f"--depth {widest - 1}: a block of {widest} rows is wider than the KV layout allows "
            f"(--block-table-width {block_table_width} x --block-size {block_size})"
        )
    if widest > MAX_WIDTH:
        raise BenchError(
            f"--depth {widest - 1}: verify width {widest} is beyond the kernel families' widths "
            f"(at most {MAX_WIDTH}, --depth {MAX_WIDTH - 1}); no build has variants for it"
        )
