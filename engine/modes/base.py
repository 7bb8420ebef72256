"""What a boundary mode is, and the registry of modes by name.

Every mode runs the engine's draft graph and the same target forward; a mode
owns only how the draft->verify and verify->draft boundaries are crossed:
its step buffers (and runtime), its captured verify graph, the verify step
and how the host reads the step's result back.  Adding a mode is one
subclass of ``Mode`` with a ``name``, registered with ``@register_mode``, in
a file of its own here (``engine/modes/__init__.py`` imports it).
"""

from __future__ import annotations

from typing import Callable, ClassVar

import torch

from ...models.errors import EngineError
from ...runtime.buffers import alloc_step_buffers

__all__ = ["MODES", "Commit", "Mode", "register_mode"]

I32 = torch.int32
Commit = tuple[torch.Tensor, torch.Tensor]  # (accepted[B], next_tokens[B, W]) on the host

MODES: dict[str, type["Mode"]] = {}


def register_mode(cls: type["Mode"]) -> type["Mode"]:
    """Make ``cls`` available as ``SpecDecodeEngine(mode=cls.name)`` (a class decorator)."""
    if not cls.name or cls.name in MODES:
        raise EngineError(f"mode name {cls.name!r} is empty or taken")
    MODES[cls.name] = cls
    return cls


class Mode:
    """One way to cross the boundaries; one instance per engine.

    The engine calls, in order: ``buffers`` (set-up), ``after_prefill``,
    ``capture`` (after the draft graph is captured), then per step
    ``verify`` and, for a ``lagged`` mode, ``read_back``; ``stats`` at the end.
    """

    name: ClassVar[str] = ""
    needs_library: ClassVar[bool] = False
    # whether ``verify`` runs the draft itself (inside its step graph); the engine then launches no draft graph
    fuses_draft: ClassVar[bool] = False
    # whether ``verify`` ends by drafting for the next step (at the end of its step graph); the engine then launches
    # the draft graph only before the first step
    trails_draft: ClassVar[bool] = False
    cpu_skip_reason: ClassVar[str | None] = None  # why a benchmark skips the mode on the CPU, if it does
    # the host clock (``time.perf_counter_ns``) where the mode's work after the verification ended on the host (its
    # read-back returned, and for baseline its host tail was issued); the engine times from it to the call that
    # launches the next draft (``RunResult.host_turnaround_us``); None where the mode's host does not wait
    synced_ns: int | None = None

    def __init__(self, engine):
        self.engine = engine  # the SpecDecodeEngine: its buffers, model, layout and graph pool

    def buffers(self) -> dict[str, torch.Tensor]:
        """The persistent step buffers the draft and verify graphs share."""
        e = self.engine
        return alloc_step_buffers(
            e.batch,
            e.width,
            e.block_table_width,
            block_size=e.block_size,
            scratch_block=e.scratch_block,
            device=e.device,
        )

    def after_prefill(self, bonus: torch.Tensor) -> None:
        """Host-side state from the prefill's bonus tokens, if the mode keeps any."""

    def capture(self) -> None:
        """Capture the verify graph (called right after the draft graph's capture)."""

    def verify(self, lo: int, hi: int, mark: Callable[[], None]) -> Commit | None:
        """Cross draft->verify, launch the verification, ``mark()``, then the host's part of the step.

        ``lo .. hi`` bound this step's ``seq_lens``.  Returns the step's host
        result, or None when it is read one step late (``lagged``).
        """
        raise NotImplementedError

    @property
    def lagged(self) -> bool:
        """Whether step i's result is read (``read_back``) only after step i + 1 is enqueued."""
        return False

    def read_back(self, steps_back: int) -> Commit:
        raise NotImplementedError

    def stats(self) -> dict | None:
        return None

    def close(self) -> None:
        """Drop what holds device memory."""
