"""The boundary modes of the decode engine, registered by name.

Every mode runs the engine's draft graph and the same target forward; a mode
owns only how the draft->verify and verify->draft boundaries are crossed:
its step buffers (and runtime), its captured verify graph, the verify step
and how the host reads the step's result back.  Adding a mode is one
subclass of ``Mode`` with a ``name``, registered with ``@register_mode``.
"""

from __future__ import annotations

from typing import Callable, ClassVar

import torch

from ...models.errors import EngineError
from ...runtime.buffers import alloc_step_buffers
from ...runtime.capabilities import capabilities_of
from ...runtime.verify_graph import Prologue, SpecVerifyRuntime
from ..graphs import compiled_updates, head_update
from ..profiling import host_range

__all__ = ["MODES", "BaselineMode", "CompileMode", "Mode", "SpecgenMode", "register_mode"]

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
    cpu_skip_reason: ClassVar[str | None] = None  # why a benchmark skips the mode on the CPU, if it does

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


@register_mode
class BaselineMode(Mode):
    """The host-serial boundary: two host synchronizations per step.

    After the final draft the host synchronizes, stacks and casts the tokens,
    computes positions, slots, KV lengths and attention tiling, and copies
    them into the verify graph's buffers; after verification it synchronizes
    again, runs the acceptance and builds the next draft's inputs on the
    host, and copies them back.
    """

    name = "baseline"
    # what the host copies into the verify graph's buffers (everything the draft-to-verify boundary computes)
    VERIFY_INPUTS = (
        "tokens",
        "positions",
        "slot_mapping",
        "kv_lens",
        "query_start_loc",
        "row_kv_lens",
        "row_num_blocks",
        "row_last_block_len",
        "row_block_offsets",
        "max_kv_len",
        "kv_split_len",
    )

    def after_prefill(self, bonus: torch.Tensor) -> None:
        e = self.engine
        self.h_last = bonus.to(I32).cpu()
        self.h_seq = e.prompt_lens.to(I32).cpu()
        self.h_bufs = alloc_step_buffers(
            e.batch, e.width, e.block_table_width, block_size=e.block_size, scratch_block=e.scratch_block
        )
        self.h_bufs["block_table"].copy_(e.block_table.cpu())
        if e.device.type == "cuda":  # pinned staging, so the H2D copies are asynchronous
            self.h_bufs = {n: t.pin_memory() for n, t in self.h_bufs.items()}

    def capture(self) -> None:
        self.verify_graph = self.engine.graph(self.engine.forward_only)

    def verify(self, lo: int, hi: int, mark: Callable[[], None]) -> Commit:
        self._boundary_in()
        self.verify_graph()
        mark()
        return self._boundary_out()

    def _boundary_in(self) -> None:
        """Draft -> verify, host-serial: sync, stack and cast, metadata and tiling on the host, H2D copies."""
        h, bufs = self.h_bufs, self.engine.bufs
        h["draft_tokens"].copy_(bufs["draft_tokens"].cpu())  # synchronizes
        h["last_tokens"].copy_(self.h_last)
        h["seq_lens"].copy_(self.h_seq)
        with host_range("spec_verify_head_update"):
            head_update(h, self.engine.block_size)
        for n in self.VERIFY_INPUTS:
            bufs[n].copy_(h[n], non_blocking=True)
        bufs["draft_tokens"].copy_(h["draft_tokens"], non_blocking=True)

    def _boundary_out(self) -> Commit:
        """Verify -> draft, host-serial: sync, then the draft's tail on the host (the proposer's) and its uploads."""
        h, bufs = self.h_bufs, self.engine.bufs
        h["target_tokens"].copy_(bufs["target_tokens"].cpu())  # synchronizes
        self.engine.proposer.host_tail(h, bufs)
        self.h_last, self.h_seq = h["next_last_token"].clone(), h["next_seq_lens"].clone()
        return h["accepted"].clone(), h["next_tokens"].clone()

    def close(self) -> None:
        self.verify_graph = self.h_bufs = None


@register_mode
class CompileMode(Mode):
    """The same update and acceptance code (the families' torch semantics) as ``torch.compile``'d
    functions, captured with the target forward in one CUDA graph; the acceptance is read back with
    a host synchronization each step, as gpt-fast does.  One host synchronization per step."""

    name = "compile"
    cpu_skip_reason = "needs CUDA (torch.compile'd updates inside CUDA graphs); skipped on the CPU"

    def updates(self) -> tuple[Callable, Callable]:
        """The draft-to-verify update and the draft's verify tail, each ``fn(bufs, block_size)``."""
        backend = self.engine.compile_backend
        return compiled_updates(backend)[0], self.engine.proposer.compiled_tail(backend)

    def capture(self) -> None:
        e = self.engine
        head, tail = self.updates()
        bufs, bs = e.bufs, e.block_size

        def verify():
            head(bufs, bs)
            e.forward_only()
            tail(bufs, bs)

        self.verify_graph = e.graph(verify)

    def verify(self, lo: int, hi: int, mark: Callable[[], None]) -> Commit:
        self.verify_graph()
        mark()
        # one read-back that synchronizes, as gpt-fast's; next_tokens is -1 past the bonus
        next_tokens = self.engine.bufs["next_tokens"].cpu()
        return (next_tokens >= 0).sum(1) - 1, next_tokens

    def close(self) -> None:
        self.verify_graph = None


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

    def kernel_library(self):
        """The library whose plans and variants the runtime runs (the engine's build)."""
        return self.engine.library

    def prologue(self) -> Prologue | None:
        """The draft as the runtime's prologue (the carry first, the drafts beside the hoisted head work), or
        None when the draft keeps its own graph."""
        p = self.engine.proposer
        return Prologue(run=p.propose, writes=p.writes, reads=p.reads, setup=p.carry) if p.fusable else None

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
                tail=e.proposer.tail,
                epilogue=e.proposer.epilogue(),
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
        return {**self.runtime.stats(), "graph": graph + list(self.engine.proposer.epilogue_names)}

    def close(self) -> None:
        self.runtime = None
