"""One prefill chunk of a request in the serving loop, through the target and the draft.

A chunk runs at its own positions over the request's blocks (and, for a hybrid
target, its linear-state slots: ``state_slots.py``).  What the draft needs of it
depends on the draft:

* the MTP head: token ``q`` with the target's hidden state of ``q - 1``, for every
  ``q <= P - 1`` of the chunk (the head's own KV); its position 0, which no row writes but its
  attention reads, is zeroed as in the engine's new cache (a sampling draft's tokens depend on it); a
  chunk's last head row sits at the position after the chunk, whose block the scheduler grew for it;
* a block draft (DFlash, DSpark): the context K/V of every chunk row, from the
  target's tapped layers (``BlockDraft.write_context``).

The last chunk gives the request's next token (drawn under its sampling parameters for a sampled
request; none for a sampled request readmitted after a preemption, whose last token is kept:
``sampling.py``) and what its first decode step starts
from, written on the device into a held slot of the row stage (``BatchRows.join``: the
last prefix token, the bonus token as the forward produced it, the hidden state the MTP
head reads, the length); the host reads the token for the scheduler afterwards, and the
first step's row is gathered from the slot by the row remap, not from that read.
"""

from __future__ import annotations

import torch

from ...runtime.semantics import slot
from ..proposers import BlockProposer
from .requests import Request
from .rows import Joined
from .sampling import first_token
from .scheduler import PrefillChunk

__all__ = ["prefill_chunk"]


def clear_slot(cache, slots: torch.Tensor) -> None:
    """Zero K and V at ``slots`` in every layer of ``cache`` (what a block's last owner left there)."""
    for layer in range(len(cache.k)):
        k, v = cache.layer_storage(layer)
        cache.write(layer, slots, torch.zeros_like(k[: len(slots)]), torch.zeros_like(v[: len(slots)]))


def prefill_chunk(loop, req: Request, chunk: PrefillChunk, bt: torch.Tensor) -> int | None:
    """Chunk ``chunk`` of ``req`` over block table ``bt[1, BT]``; the last chunk's new token (else None)."""
    BS, dev, model = loop.block_size, loop.device, loop.model
    s, n = chunk.start, len(chunk.tokens)
    pos = torch.arange(s, s + n, device=dev)
    slots = slot(bt, pos[None], BS).reshape(-1)
    toks = torch.tensor(chunk.tokens, device=dev)
    qsl = torch.tensor([0, n], device=dev)
    kv = torch.tensor([s + n], device=dev)
    state = loop.state.prefill_kwargs(req.id, s, n) if loop.hybrid else {}
    P, prefix = req.prefill_len, req.prefix
    block = isinstance(loop.engine.proposer, BlockProposer)
    if block:  # context K/V for every row of the chunk
        draft = loop.engine.proposer.draft
        _, logits, taps = model(toks, pos, slots, bt, kv, qsl, n, taps=draft.tap_layers, **state)
        draft.write_context(taps, pos, slots)
        hidden = None
    else:
        hidden, logits = model(toks, pos, slots, bt, kv, qsl, n, **state)
        hidden = loop.head.from_target(hidden)
        if s == 0:  # nothing writes the head's position 0; the engine's cache holds zeros there, as a new one does
            clear_slot(loop.head.kv_cache, slots[:1])
        m = min(s + n, P - 1) - s  # head rows: token q with the target's hidden state of q - 1, for q <= P - 1
        if m > 0:
            q = torch.arange(s + 1, s + 1 + m, device=dev)
            dt = torch.tensor(prefix[s + 1 : s + 1 + m], device=dev)
            kv = torch.tensor([s + 1 + m], device=dev)
            loop.head(dt, q, slot(bt, q[None], BS).reshape(-1), hidden[:m], bt, kv, torch.tensor([0, m], device=dev), m)
    if not chunk.last:
        return None
    resumed = P < req.length  # a sampled request readmitted: its last token is the first step's input
    if resumed:
        token = torch.tensor([prefix[P]], dtype=torch.int32, device=dev)
    elif req.sampled:  # drawn as the engine's prefill draws it (serving/sampling.py)
        token = first_token(req, logits[n - 1 : n], P)
    else:
        token = model.greedy_tokens(logits[n - 1 : n]).to(torch.int32)
    # the first step's state from the prefill on the device (the bonus as the forward left it), before the
    # host reads the token for the scheduler
    joined = Joined(prefix[P - 1], 0, None if block else hidden[n - 1], P)
    loop.rows.join(req.id, joined, token, None if block else loop.engine.verify_hidden)
    bonus = int(token[0])
    loop.rows.joined[req.id].bonus = bonus  # baseline's host copies take it from here
    return None if resumed else bonus
