"""What one verify step returns (``StepResult``) and the work an engine runs at its head (``Prologue``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .buffers import INPUTS

__all__ = ["RESULT_FIELDS", "Prologue", "StepResult"]

RESULT_FIELDS = (
    "accepted",
    "next_tokens",
    "next_last_token",
    "next_seq_lens",
    "draft_positions",
    "draft_slots",
    "hidden_rows",
)


@dataclass(frozen=True)
class StepResult:
    accepted: torch.Tensor  # [B]
    next_tokens: torch.Tensor  # [B, W]
    next_last_token: torch.Tensor  # [B]
    next_seq_lens: torch.Tensor  # [B]
    draft_positions: torch.Tensor  # [B, 2]
    draft_slots: torch.Tensor  # [B, 2]
    hidden_rows: torch.Tensor  # [B, 2]
    fast_path: bool = False
    reason: str | None = None  # the fallback reason, None on the fast path


@dataclass(frozen=True)
class Prologue:
    """Work at the head of every step (see the module docstring).

    ``run`` writes ``writes`` and reads ``reads`` (buffer names); ``setup``,
    when given, runs before it and before any head work moved beside it.
    The default ``writes`` is every step input, which moves nothing.
    """

    run: Callable[[], None]
    writes: tuple[str, ...] = INPUTS
    reads: tuple[str, ...] = ()
    setup: Callable[[], None] | None = None

    def __call__(self) -> None:
        """``setup``, then ``run``: the whole prologue with nothing beside it."""
        if self.setup is not None:
            self.setup()
        self.run()
