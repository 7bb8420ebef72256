"""Acceptance with known commit lengths: the acceptance control's tables, filled so each step accepts ``a``.

``AcceptanceMix`` replaces draft token ``g`` (the generated index of its
position) by the oracle's with the probability ``p``.  Here the hit table is
written instead: step ``i`` of sequence ``b`` proposes the drafts at generated
indices ``g_i .. g_i + W - 2`` (``g_0 = 1``, right after the prefill's bonus
token), the first ``lengths[b][i]`` are hits and the next is a miss, so the
target accepts exactly ``lengths[b][i]`` drafts and ``g_{i+1} = g_i +
lengths[b][i] + 1``::

    mix = pinned_acceptance(oracle, vocab_size, [[3, 0, 1], [2, 2, 0]], width=4)
    SpecDecodeEngine(..., width=4, acceptance=mix).run(prompts, steps=3)   # accepted: (3, 2), (0, 2), (1, 0)

Losslessness hides a wrong ``kv_lens`` or scratch condition (it only lowers
acceptance); with the lengths pinned, a test knows every step's state on the
host and can compare the device's metadata with the semantics.
"""

from __future__ import annotations

import torch

from specgen.engine.acceptance import AcceptanceMix
from specgen.models.errors import EngineError

__all__ = ["pinned_acceptance", "pinned_starts"]


def pinned_starts(lengths: list[list[int]]) -> list[list[int]]:
    """``g_i`` of every step of every sequence (the generated index of step i's first draft)."""
    out = []
    for row in lengths:
        g, starts = 1, []
        for a in row:
            starts.append(g)
            g += a + 1
        out.append(starts)
    return out


def pinned_acceptance(oracle: torch.Tensor, vocab_size: int, lengths: list[list[int]], width: int) -> AcceptanceMix:
    """An ``AcceptanceMix`` over ``oracle`` whose step ``i`` of sequence ``b`` accepts ``lengths[b][i]`` drafts."""
    if len(lengths) != oracle.shape[0]:
        raise EngineError(f"{len(lengths)} length rows for {oracle.shape[0]} sequences")
    mix = AcceptanceMix(0.0, oracle, vocab_size)
    hit = torch.zeros_like(mix.hit)
    for b, (row, starts) in enumerate(zip(lengths, pinned_starts(lengths))):
        for a, g in zip(row, starts):
            if not 0 <= a <= width - 1:
                raise EngineError(f"an accepted count lies in 0..{width - 1}, got {a}")
            if g + width - 1 > oracle.shape[1]:
                raise EngineError(f"the oracle holds {oracle.shape[1]} tokens; step at {g} needs {g + width - 1}")
            hit[b, g : g + a] = True
    mix.hit = hit
    return mix
