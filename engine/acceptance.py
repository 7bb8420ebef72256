"""Drafts whose agreement with the target is set by a probability ``p``.

Benchmarks sweep acceptance rates without a trained draft model: every draft
token is replaced by the target's own greedy token (the *oracle*) with
probability ``p`` and by a different token otherwise.  Since committed tokens
always equal greedy decoding's, the oracle token is exactly what the target
picks, so the accepted length per step follows ``P(a >= k) = p**k``
(truncated at ``W - 1``).

One mechanism serves both decode loops: the choices are drawn once, from
``seed``, as two ``[B, G]`` tables indexed by (sequence, generated index);
a lookup is a fixed-shape gather, so the engine's captured draft graph and
the host-driven loop of ``decode.py`` read the same tables and a run's acceptance
does not depend on the mode.
"""

from __future__ import annotations

import torch

from ..models.errors import EngineError

__all__ = ["AcceptanceMix"]


class AcceptanceMix:
    """Draft tokens that equal the oracle's with probability ``p``, looked up on the oracle's device.

    ``oracle[b, g]`` is sequence b's greedy token at generated index g.  It may
    be left out and bound later with ``bound`` (``speculative_generate``
    computes it for its own prompts).
    """

    def __init__(self, p: float, oracle: torch.Tensor | None = None, vocab_size: int | None = None, seed: int = 0):
        if not 0.0 <= p <= 1.0:
            raise EngineError(f"acceptance p must lie in [0, 1], got {p}")
        self.p, self.seed = p, seed
        self.oracle = None
        if oracle is not None:
            if vocab_size is None:
                raise EngineError("an acceptance oracle needs the vocabulary size")
            self._draw(oracle, vocab_size)

    def _draw(self, oracle: torch.Tensor, vocab_size: int) -> None:
        gen = torch.Generator().manual_seed(self.seed)
        self.oracle = oracle.long()
        shape = tuple(oracle.shape)
        self.hit = (torch.rand(shape, generator=gen) < self.p).to(oracle.device)
        self.other = ((self.oracle.cpu() + 1 + torch.randint(0, vocab_size - 1, shape, generator=gen)) % vocab_size).to(
            oracle.device
        )

    def covers(self, batch: int, horizon: int) -> bool:
        """Whether the bound oracle has ``batch`` sequences of at least ``horizon`` tokens."""
        return self.oracle is not None and tuple(self.oracle.shape[:1]) == (batch,) and self.oracle.shape[1] >= horizon

    def bound(self, oracle: torch.Tensor, vocab_size: int) -> "AcceptanceMix":
        """The same ``p`` and ``seed`` over ``oracle``."""
        return AcceptanceMix(self.p, oracle, vocab_size, seed=self.seed)

    def _pick(self, start: torch.Tensor, first: int, k: int) -> torch.Tensor:
        """Tokens at generated indices ``start[b] + first .. start[b] + first + k - 1`` (clamped)."""
        idx = start[:, None] + torch.arange(first, first + k, device=start.device)
        idx = idx.clamp(0, self.oracle.shape[1] - 1)
        return torch.where(self.hit.gather(1, idx), self.oracle.gather(1, idx), self.other.gather(1, idx))

    def apply(self, drafts: torch.Tensor, next_seq_lens: torch.Tensor, prompt_lens: torch.Tensor) -> torch.Tensor:
        """``drafts[B, K]`` for positions ``S' + 1 .. S' + K`` -> the mixed drafts (fixed shapes only).

        Position ``S' + j`` of a sequence with prompt length ``P`` holds
        generated index ``S' - P + j``.
        """
        return self._pick(next_seq_lens.long() - prompt_lens, 1, drafts.shape[1]).to(drafts.dtype)

    def propose(self, generated: torch.Tensor, k: int) -> torch.Tensor:
        """``k`` drafts per sequence for generated indices ``generated[b] ..`` (the host-driven loop)."""
        return self._pick(generated.long(), 0, k)
