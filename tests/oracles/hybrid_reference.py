"""From-scratch references for a hybrid target: greedy decoding and the committed linear state.

Every call runs the whole sequence as one prefill from the zero state into a
fresh cache, so nothing a decode loop keeps (paged KV, state slots) can leak
into the reference: ``hybrid_greedy`` re-runs the prompt plus every token so
far for each new token, and ``committed_state`` gives the recurrent state and
conv window after a sequence's tokens.
"""

from __future__ import annotations

import torch

from specgen.models.qwen3_5 import Qwen35Model

__all__ = ["CommittedStates", "committed_state", "hybrid_greedy"]

I32 = torch.int32


def _from_scratch(model: Qwen35Model, tokens: list[int]):
    """Hidden state and logits of one sequence's prefill, and the pool holding its final state at slot 0."""
    n, bs, dev = len(tokens), 16, model.embed_tokens.weight.device
    blocks = -(-n // bs)
    saved = (model.kv_cache, model.linear_state, model.block_table_width)
    try:
        model.allocate_kv_cache(blocks + 1, bs, block_table_width=blocks)
        pool = model.allocate_linear_state(1)
        table = torch.arange(1, blocks + 1, dtype=I32, device=dev)[None]
        pos = torch.arange(n, device=dev)
        slots = (table[0].long()[pos // bs] * bs + pos % bs).to(I32)
        write = torch.full((n,), -1, dtype=I32, device=dev)
        write[-1] = 0
        _, logits = model(
            torch.tensor(tokens, device=dev),
            pos,
            slots,
            table,
            torch.tensor([n], device=dev),
            torch.tensor([0, n], device=dev),
            n,
            state_read=torch.tensor([-1], dtype=I32, device=dev),
            state_write=write,
        )
        return logits, pool
    finally:
        model.kv_cache, model.linear_state, model.block_table_width = saved


def hybrid_greedy(model: Qwen35Model, prompts: list[list[int]], n: int) -> list[list[int]]:
    """``n`` greedy tokens per prompt, each from a prefill of everything before it."""
    out = []
    for p in prompts:
        seq = list(p)
        for _ in range(n):
            logits, _ = _from_scratch(model, seq)
            seq.append(int(logits[-1].argmax()))
        out.append(seq[len(p) :])
    return out


def committed_state(model: Qwen35Model, tokens: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The recurrent state and conv window of every linear layer after ``tokens``."""
    _, pool = _from_scratch(model, tokens)
    zero = torch.tensor([0], dtype=I32, device=pool.recurrent[0].device)
    return [tuple(t[0] for t in pool.read(layer, zero)) for layer in range(len(pool.recurrent))]


class CommittedStates:
    """An engine observer: after every step, each linear layer's committed ``(state, window)`` (this rank's heads)."""

    def __init__(self):
        self.steps = []

    def before_step(self, engine, i):
        pass

    def after_step(self, engine, i):
        accepted = engine.bufs["accepted"]
        layers = len(engine.state.pool.recurrent)
        self.steps.append([tuple(t.clone() for t in engine.state.committed(accepted, k)) for k in range(layers)])
