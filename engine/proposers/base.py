"""The proposer seam: what a draft does for the decode loop, and what the boundary modes ask of it.

``SpecDecodeEngine`` owns the resources (KV caches, step buffers, graphs) and
the loop; a ``Proposer`` owns everything that depends on the kind of draft::

    p = MTPProposer(head)                      # or BlockProposer(block_draft)
    engine = SpecDecodeEngine(model, p, mode="specgen", width=4, batch=8, library=lib)

The engine calls ``bind`` once, ``allocate`` and ``alloc_hidden`` at set-up,
``prefill`` once per run, and the draft graph's body ``carry`` then
``propose`` every step (``propose`` writes ``writes`` and reads ``reads``,
step-buffer names).  The target forward of every mode is
``target_forward(bufs)``, which keeps what the draft reads of the target (the
hidden states of the verify rows, or the block draft's taps) in
``engine.verify_hidden``.

What crosses the verify->draft boundary differs per draft, so the modes ask:
``tail`` (the boundary whose plan follows the target forward: ``verify-to-draft``
for a chain draft, ``context-kv`` for a block draft), ``epilogue`` (device work
after the tail, in the captured graph: ``None`` or a callable), ``host_tail``
(the host-serial version, for ``baseline``) and ``compiled_tail`` (the
``torch.compile``'d one, for ``compile``).  ``modes`` names the boundary modes
the draft runs; ``fusable`` says whether ``specgen`` may run the draft inside
its step graph (as the runtime's prologue), ``can_trail`` whether it may run at
the step graph's end instead, drafting for the next step (``draft_at_end``).
"""

from __future__ import annotations

from typing import Callable, ClassVar

import torch

from ...runtime.buffers import INPUTS
from ...runtime.semantics import slot

__all__ = ["Proposer"]


class Proposer:
    """One kind of draft behind the decode loop; see the module docstring."""

    tail: ClassVar[str]
    fusable: ClassVar[bool] = False
    can_trail: ClassVar[bool] = False  # whether ``specgen`` may run the draft at its step graph's end (draft_at_end)
    unsupported_modes: ClassVar[tuple[str, ...]] = ()  # registered modes this draft cannot run
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ("draft_tokens",)
    epilogue_names: ClassVar[tuple[str, ...]] = ()  # what ``epilogue`` runs, for the step graph's listing
    samples: ClassVar[bool] = False  # whether a sampling engine's draft samples (else it is one-hot: q(x) = 1)
    host_families: ClassVar[tuple[str, ...]] = ()  # the families ``host_tail`` runs and marks (``host_range``)

    def __init__(self, module: torch.nn.Module):
        self.module = module  # the draft network (MTP head, block draft)
        self.engine = None

    def bind(self, engine) -> None:
        """Attach to ``engine`` (its buffers, model, layout) and check the layout fits the draft."""
        self.engine = engine

    def modes(self, registry) -> list[str]:
        """The names of ``registry``'s modes this draft runs."""
        return [m for m in registry if m not in self.unsupported_modes]

    def rows(self, depth: int) -> int:
        """Rows of one draft forward for ``depth`` drafts."""
        raise NotImplementedError

    def allocate(self, num_blocks: int, block_size: int) -> None:
        """The draft's own KV cache over the engine's block pool."""
        self.module.allocate_kv_cache(num_blocks, block_size)

    def alloc_hidden(self) -> torch.Tensor:
        """``engine.verify_hidden``: what the target forward keeps for the draft, one row per verify row."""
        raise NotImplementedError

    def release(self) -> None:
        """Drop what ``alloc_hidden`` set up besides ``verify_hidden`` (the engine's ``close``)."""

    def prefill(self, prompts: list[list[int]]) -> torch.Tensor:
        """Target and draft prefill; leaves the first draft's inputs in the step buffers; the bonus tokens."""
        raise NotImplementedError

    def prompt_rows(self, prompts: list[list[int]]):
        """The prompts as one padded prefill batch of ``r`` rows per sequence: ``(tokens[B, r], idx[r],
        positions[B, r], slots[B, r], query_start_loc[B + 1], r)``; padding rows have slot -1 (no write)."""
        e = self.engine
        B, dev = e.batch, e.device
        r = max(len(p) for p in prompts)
        toks = torch.tensor([p + [0] * (r - len(p)) for p in prompts], device=dev)
        idx = torch.arange(r, device=dev)
        pos = idx.expand(B, r)
        slots = torch.where(
            idx < e.prompt_lens[:, None], slot(e.block_table, pos, e.block_size), torch.full_like(pos, -1)
        )
        return toks, idx, pos, slots, torch.arange(B + 1, device=dev) * r, r

    def target_forward(self, bufs) -> torch.Tensor:
        """The target over the verify rows of ``bufs``; returns ``target[B, W]`` (any integer dtype: callers copy
        it into the int32 ``target_tokens`` unless it is that buffer)."""
        raise NotImplementedError

    def greedy_into(self, logits: torch.Tensor, bufs) -> torch.Tensor:
        """The target's greedy tokens of ``logits`` as ``[rows, W]``: written straight into ``bufs``'
        ``target_tokens`` (and returned as it) when that buffer has one entry per logits row, so the caller's
        copy is skipped and no casting kernel runs; otherwise the model's int64 tokens.  A sampling engine
        takes no argmax: its vocabulary pass writes every row's token (a greedy row's argmax too) into
        ``target_tokens``, and ``baseline``'s host rule reads the row's token only where it writes it."""
        e = self.engine
        dst = bufs.get("target_tokens") if hasattr(bufs, "get") else None
        if e.sampling is not None and dst is not None:
            return dst
        rows = logits.numel() // max(logits.shape[-1], 1)
        if dst is not None and dst.is_contiguous() and dst.numel() == rows and dst.shape[-1] == e.width:
            return e.model.greedy_tokens(logits, out=dst.view(-1)).view(dst.shape)
        return e.model.greedy_tokens(logits).view(-1, e.width)

    # the step buffers ``carry`` writes: the runtime runs it beside the draft when ``propose`` reads none of them
    # (the default, every step input, keeps it before the draft)
    carry_writes: tuple[str, ...] = INPUTS

    def carry(self) -> None:
        """The previous step's bonus token and length become this step's inputs (a no-op if ``propose`` does it)."""

    def propose(self) -> None:
        """Write this step's drafts into the step buffers."""
        raise NotImplementedError

    def epilogue(self) -> Callable[[], None] | None:
        """Device work after the tail, inside the captured verify graph (None: nothing)."""
        return None

    def draft_work_after_verify(self) -> Callable[[], None] | None:
        """The part of ``epilogue`` that is the draft's own computation rather than boundary work (the block
        draft's context projection of the verify rows), for the bench to measure the verify->draft gap
        outside it; None: none."""
        return None

    def host_tail(self, h: dict, bufs: dict, accept: bool = True) -> None:
        """``baseline``'s verify->draft work on the host buffers ``h`` (target tokens read back), uploaded to
        ``bufs``; leaves ``accepted``, ``next_tokens``, ``next_last_token`` and ``next_seq_lens`` in ``h``.
        ``accept=False``: the host already verified (a sampling engine's rule), so the greedy acceptance is
        skipped and ``h``'s ``accepted`` and ``next_tokens`` are kept."""
        raise NotImplementedError

    def compiled_tail(self, backend: str, sampled: bool = False) -> Callable[[dict, int], None]:
        """``compile``'s verify tail as a ``torch.compile``'d ``fn(bufs, block_size)``; ``sampled``: with
        ``spec_rejection_verify``'s semantics in place of ``greedy_prefix_verify``'s."""
        raise NotImplementedError

    def first_tokens(self, logits: torch.Tensor) -> torch.Tensor:
        """The token after each prompt from the prefill's last rows: the target's greedy token, or a sampling
        engine's draw (``EngineSampling.first_tokens``)."""
        e = self.engine
        return e.model.greedy_tokens(logits) if e.sampling is None else e.sampling.first_tokens(logits)

    def keep_logits(self, logits: torch.Tensor) -> None:
        """A sampling engine keeps the target's verify-row logits (its vocabulary pass reads them)."""
        if self.engine.sampling is not None:
            self.engine.sampling.keep_logits(logits)
