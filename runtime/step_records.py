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
    when given, runs before any head work moved beside it, and before ``run``
    unless ``run`` neither reads nor writes what it writes (``setup_writes``):
    then, on a device, it runs on the side stream beside ``run``, ahead of
    the head work there.  The default ``writes`` and ``setup_writes`` are
    every step input, which moves nothing.
    """

    run: Callable[[], None]
    writes: tuple[str, ...] = INPUTS
    reads: tuple[str, ...] = ()
    setup: Callable[[], None] | None = None
    setup_writes: tuple[str, ...] = INPUTS

    @property
    def setup_beside(self) -> bool:
        """Whether ``setup`` may run beside ``run``: ``run`` touches nothing ``setup`` writes."""
        return self.setup is not None and not set(self.setup_writes) & (set(self.reads) | set(self.writes))

    def __call__(self) -> None:
        """``setup``, then ``run``: the whole prologue with nothing beside it."""
        if self.setup is not None:
            self.setup()
        self.run()
