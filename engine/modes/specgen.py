"""``specgen``: ``SpecVerifyRuntime``'s step graph, the built kernel variants at its head."""

from __future__ import annotations

from typing import Callable

import torch

from ...models.errors import EngineError
from ...runtime.capabilities import capabilities_of
from ...runtime.verify_graph import Prologue, SpecVerifyRuntime
from ...specializations.plan import SAMPLED_TAILS
from .base import Commit, Mode, register_mode

__all__ = ["SpecgenMode"]


@register_mode
class SpecgenMode(Mode):
    """``SpecVerifyRuntime``'s step graph: no host synchronization and no graph switch per step.

    The draft runs at the head of the runtime's captured graph (its
    ``prologue``) and writes straight into the runtime's persistent buffers;
    the built kernel variants update the verify inputs in the same graph,
    acceptance and next-draft preparation run on the device, and on a device
    the host reads each step's tokens one step late through a pinned buffer
    and an event.  One replay per step: the last draft kernel is followed by
    the head kernel and the target forward with no graph launch between them.
    """

    name = "specgen"
    needs_library = True

    @property
    def fuses_draft(self) -> bool:  # the draft runs as the runtime's prologue when the proposer allows it
        return self.engine.proposer.fusable

    @property
    def trails_draft(self) -> bool:  # a draft with its own graph runs at the step graph's end instead (draft_at_end)
        return self.engine.draft_at_end and not self.engine.proposer.fusable

    def epilogue(self) -> Callable[[], None] | None:
        """The proposer's work after the tail, then (``trails_draft``) the next step's draft: its anchor carried and
        its block forward, after the context rows it reads are stored.  The eager fallback step runs it too, so every
        step, fast or not, leaves the next step's drafts in the buffers."""
        work = self.engine.proposer.epilogue()
        if not self.trails_draft:
            return work
        draft = self.engine._draft

        def run() -> None:
            if work is not None:
                work()
            draft()

        return run

    def kernel_library(self):
        """The library whose plans and variants the runtime runs (the engine's build)."""
        return self.engine.library

    def prologue(self) -> Prologue | None:
        """The draft as the runtime's prologue (the carry first, the drafts beside the hoisted head work), or
        None when the draft keeps its own graph."""
        p = self.engine.proposer
        if not p.fusable:
            return None
        return Prologue(run=p.propose, writes=p.writes, reads=p.reads, setup=p.carry, setup_writes=p.carry_writes)

    def buffers(self) -> dict[str, torch.Tensor]:
        e = self.engine
        backend = "cuda" if e.device.type == "cuda" else "cpu"
        try:
            self.runtime = SpecVerifyRuntime(
                self.kernel_library(),
                e.target_forward,
                capabilities_of(e.model),
                e.width,
                max_batch=e.batch,
                backend=backend,
                device=e.device,
                block_table_width=e.block_table_width,
                block_size=e.block_size,
                scratch_block=e.scratch_block,
                prologue=self.prologue(),
                tail=e.proposer.tail if e.sampling is None else SAMPLED_TAILS[e.proposer.tail],
                epilogue=self.epilogue(),
                sampler=None if e.sampling is None else e.sampling.sampler,
                device_guard=e.device_guard,
                side_streams=e.side_streams,
                mapped_mirror=e.mapped_mirror,
            )
            self.runtime.check_block_table(e.block_table)
            return self.runtime.buffers(e.batch)
        except (LookupError, ValueError) as err:
            raise EngineError(f"{self.name} mode: {err}") from None

    def capture(self) -> None:
        # after the draft warm-up wrote the verify inputs; the verify graph is captured on the first step
        self.runtime.capture(self.engine.batch)

    @property
    def lagged(self) -> bool:
        return self.engine.device.type != "cpu"

    def verify(self, lo: int, hi: int, mark: Callable[[], None]) -> Commit | None:
        result = self.runtime.step_in_place(self.engine.batch, (lo, hi))
        mark()
        if not self.lagged:  # eager: nothing is in flight, the step's results are final
            return result.accepted.clone(), result.next_tokens.clone()
        return None

    def read_back(self, steps_back: int) -> Commit:
        host = self.runtime.host_result(steps_back)
        return host.accepted.clone(), host.next_tokens.clone()

    def stats(self) -> dict | None:
        """The runtime's counts and what its step graph runs (plan steps, then the draft's epilogue)."""
        graph = [s.name for s in (*self.runtime.hoisted, *self.runtime.sequence)]
        after = list(self.engine.proposer.epilogue_names) + ["next_draft"] * self.trails_draft
        return {**self.runtime.stats(), "graph": graph + after}

    def close(self) -> None:
        self.runtime = None
