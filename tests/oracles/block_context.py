"""Eager references for block drafts: forced commit lengths and a compact per-sequence context.

``forced_acceptance`` makes an acceptance control whose drafts commit exactly
the given lengths: step ``i`` of sequence ``b`` accepts ``commits[b][i]``
drafts (0..K), so it commits that many plus the bonus.  ``context_reference``
decodes with those drafts through plain host-driven verification and keeps,
per sequence, the context K/V of every committed position in a compact
tensor (no paging, no slots): position ``p`` of sequence ``b`` is row ``p``
of ``ctx[b][layer]``.  A paged draft cache is right when the row it holds at
``slot(b, p)`` equals that row for every ``p < S'`` and nothing else was
written.
"""

from __future__ import annotations

import torch

from specgen.engine.acceptance import AcceptanceMix
from specgen.engine.decode import greedy_prefix
from specgen.models.block_draft import BlockDraft
from specgen.models.paged_kv import verify_metadata
from specgen.models.qwen3 import Qwen3Model
from specgen.runtime.semantics import slot

__all__ = ["context_reference", "forced_acceptance", "paged_context"]


def forced_acceptance(oracle: torch.Tensor, vocab_size: int, commits: list[list[int]], depth: int) -> AcceptanceMix:
    """Drafts that equal the oracle except where ``commits`` stop them (later steps: all accepted)."""
    mix = AcceptanceMix(1.0, oracle, vocab_size)
    hit = mix.hit.clone()
    for b, seq in enumerate(commits):
        g = 0  # generated index of the step's anchor; its drafts are g + 1 .. g + depth
        for a in seq:
            if not 0 <= a <= depth:
                raise ValueError(f"accepted count {a} is outside 0..{depth}")
            if a < depth and g + 1 + a < hit.shape[1]:
                hit[b, g + 1 + a] = False
            g += a + 1
    mix.hit = hit
    return mix


@torch.inference_mode()
def context_reference(
    model: Qwen3Model,
    draft: BlockDraft,
    prompts: list[list[int]],
    mix: AcceptanceMix,
    steps: int,
    depth: int,
    *,
    block_size: int,
    block_table_width: int,
):
    """``steps`` verifications with ``mix``'s drafts; returns ``(outputs, accepted per step, ctx)``.

    ``ctx[b][layer]`` is ``(K, V)`` of sequence b's committed positions ``0 .. S'-1``: each step
    appends the sequence's accepted rows, found by the host from the acceptance (no slots).
    """
    B, W, BS, BT = len(prompts), depth + 1, block_size, block_table_width
    dev = model.embed_tokens.weight.device
    model.allocate_kv_cache(1 + B * BT, BS, block_table_width=BT)
    bt = (1 + torch.arange(B * BT, dtype=torch.int32, device=dev)).view(B, BT)
    lens = torch.tensor([len(p) for p in prompts], device=dev)
    r = int(lens.max())
    toks = torch.tensor([p + [0] * (r - len(p)) for p in prompts], device=dev)
    idx = torch.arange(r, device=dev)
    slots = torch.where(idx < lens[:, None], slot(bt, idx.expand(B, r), BS), torch.full((B, r), -1, device=dev))
    _, logits, taps = model(
        toks.reshape(-1),
        idx.repeat(B),
        slots.reshape(-1),
        bt,
        lens,
        torch.arange(B + 1, device=dev) * r,
        r,
        taps=draft.tap_layers,
    )
    bonus = logits[torch.arange(B, device=dev) * r + lens - 1].argmax(-1)
    # Projections run over all rows of a forward, as the engine's do (a GEMM row's bits depend on the
    # row count); the compact store keeps each sequence's committed rows only.
    full = draft.context_kv(taps, idx.repeat(B))
    ctx = [[[k[b * r : b * r + len(p)], v[b * r : b * r + len(p)]] for k, v in full] for b, p in enumerate(prompts)]
    outputs, history, seq = [[t] for t in bonus.tolist()], [], lens.clone()
    for _ in range(steps):
        drafts = mix.propose(seq - lens + 1, depth)
        tokens = torch.cat([bonus[:, None], drafts], 1).reshape(-1)
        meta = verify_metadata(seq, bt, W, BS)
        _, logits, taps = model(tokens, *meta[:2], bt, *meta[2:], W, taps=draft.tap_layers)
        target = logits.argmax(-1).view(B, W)
        accepted = greedy_prefix(drafts, target)
        history.append(accepted.tolist())
        full = draft.context_kv(taps, meta[0])
        for b, a in enumerate(accepted.tolist()):
            for layer, (k, v) in enumerate(full):
                ctx[b][layer][0] = torch.cat([ctx[b][layer][0], k[b * W : b * W + a + 1]])
                ctx[b][layer][1] = torch.cat([ctx[b][layer][1], v[b * W : b * W + a + 1]])
            outputs[b].extend(target[b, : a + 1].tolist())
        bonus = target.gather(1, accepted[:, None]).squeeze(1)
        seq = seq + accepted + 1
    return outputs, history, [[tuple(kv) for kv in c] for c in ctx]


def paged_context(draft: BlockDraft, block_table: torch.Tensor, seq_lens: list[int]):
    """What a paged draft cache holds for positions ``0 .. seq_lens[b] - 1`` of each sequence, and the rest.

    Returns ``(rows, others)``: ``rows[b][layer] = (K, V)`` in position order; ``others`` is every
    slot that belongs to no such position, per layer ``(K, V)`` stacked (all zero when nothing
    else was ever written).
    """
    cache = draft.kv_cache
    used = torch.zeros(cache.num_slots, dtype=torch.bool)
    rows = []
    for b, s in enumerate(seq_lens):
        sl = slot(block_table[b : b + 1].cpu(), torch.arange(s)[None], cache.block_size).reshape(-1).long()
        used[sl] = True
        rows.append(
            [(cache._k[i][sl.to(cache._k.device)], cache._v[i][sl.to(cache._k.device)]) for i in range(len(cache.k))]
        )
    free = (~used).nonzero().reshape(-1).to(cache._k.device)
    others = [(cache._k[i][free], cache._v[i][free]) for i in range(len(cache.k))]
    return rows, others
