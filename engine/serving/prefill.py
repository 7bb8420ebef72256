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
first step's row is gathered from the slot by the row remap, not from that read.  With
``loop.late_first`` the host does not wait for it: the chunk returns a ``FirstToken`` (a pinned
copy and an event on the stream that produced it), read one step later, after the request's first
verify step is launched.  The chunk's inputs go up from pinned memory (``upload``), so a prefill
under ``late_first`` costs no host synchronization.
"""

from __future__ import annotations

import torch

from ...runtime.semantics import slot
from ..proposers import BlockProposer
from ..sampling import whole_rows
from .requests import Request
from .rows import Joined, upload
from .sampling import first_token
from .scheduler import PrefillChunk

__all__ = ["FirstToken", "prefill_chunk"]


class FirstToken:
    """A prefill's token on its way to the host: a pinned copy and an event recorded after it on the stream
    that produced it; ``read`` waits on that event only (on the CPU the value is at hand)."""

    def __init__(self, token: torch.Tensor):
        token = token.reshape(1)
        self.event = None
        if token.device.type == "cuda":
            self.host = torch.empty(1, dtype=token.dtype, pin_memory=True)
            self.host.copy_(token, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record()
        else:
            self.host = token.clone()

    def read(self) -> int:
        if self.event is not None:
            self.event.synchronize()
        return int(self.host[0])


def clear_slot(cache, slots: torch.Tensor) -> None:
    """Zero K and V at ``slots`` in every layer of ``cache`` (what a block's last owner left there)."""
    for layer in range(len(cache.k)):
        k, v = cache.layer_storage(layer)
        cache.write(layer, slots, torch.zeros_like(k[: len(slots)]), torch.zeros_like(v[: len(slots)]))


def _up(values, dev) -> torch.Tensor:
    return upload(torch.tensor(values, dtype=torch.long), dev)


def _eager(loop, req: Request, chunk: PrefillChunk, bt: torch.Tensor, block: bool):
    """The chunk's forward launched op by op: ``(hidden, logits)`` (``hidden`` None for a block draft)."""
    BS, dev, model = loop.block_size, loop.device, loop.model
    s, n = chunk.start, len(chunk.tokens)
    pos = torch.arange(s, s + n, device=dev)
    slots = slot(bt, pos[None], BS).reshape(-1)
    toks = _up(chunk.tokens, dev)
    qsl = _up([0, n], dev)
    kv = _up([s + n], dev)
    state = loop.state.prefill_kwargs(req.id, s, n) if loop.hybrid else {}
    P, prefix = req.prefill_len, req.prefix
    # the LM head over the chunk's last row alone, and over none before the last chunk: a prefill reads no
    # other row's logits (over every row of a long chunk it was a large share of the forward)
    rows = slice(n - 1, n) if chunk.last else slice(0, 0)
    if block:  # context K/V for every row of the chunk
        draft = loop.engine.proposer.draft
        _, logits, taps = model(toks, pos, slots, bt, kv, qsl, n, taps=draft.tap_layers, logit_rows=rows, **state)
        draft.write_context(taps, pos, slots)
        return None, logits
    hidden, logits = model(toks, pos, slots, bt, kv, qsl, n, logit_rows=rows, **state)
    hidden = loop.head.from_target(hidden)
    if s == 0:  # nothing writes the head's position 0; the engine's cache holds zeros there, as a new one does
        clear_slot(loop.head.kv_cache, slots[:1])
    m = min(s + n, P - 1) - s  # head rows: token q with the target's hidden state of q - 1, for q <= P - 1
    if m > 0:
        q = torch.arange(s + 1, s + 1 + m, device=dev)
        dt, kv = _up(prefix[s + 1 : s + 1 + m], dev), _up([s + 1 + m], dev)
        loop.head(
            dt, q, slot(bt, q[None], BS).reshape(-1), hidden[:m], bt, kv, _up([0, m], dev), m, slice(0, 0)
        )  # K/V only: a prefill reads none of the head's logits
    return hidden, logits


def prefill_chunk(loop, req: Request, chunk: PrefillChunk, table: tuple[int, ...]) -> int | FirstToken | None:
    """Chunk ``chunk`` of ``req`` over its block table ``table`` (host values); the last chunk's new token (a
    ``FirstToken`` under ``loop.late_first``; None for a chunk before the last and a resumed sampled request).
    A chunk that fits a bucket of ``loop.prefill_graphs`` replays its graph (``prefill_graphs.py``), a longer one
    the largest bucket's graphs piece by piece, as if the scheduler had cut it so; a greedy request's last chunk
    there also takes its token and writes its held staging row."""
    dev, model = loop.device, loop.model
    graphs = loop.prefill_graphs  # None for a hybrid target (prefill_graphs.unsupported)
    if graphs is not None and len(chunk.tokens) > graphs.rows:  # pieces of the largest bucket, the last as asked
        top, cut = graphs.rows, (len(chunk.tokens) - 1) // graphs.rows * graphs.rows
        for at in range(0, cut, top):
            piece = PrefillChunk(chunk.id, chunk.start + at, chunk.tokens[at : at + top], False)
            prefill_chunk(loop, req, piece, table)
        chunk = PrefillChunk(chunk.id, chunk.start + cut, chunk.tokens[cut:], chunk.last)
    s, n = chunk.start, len(chunk.tokens)
    P, prefix = req.prefill_len, req.prefix
    block = isinstance(loop.engine.proposer, BlockProposer)
    row = loop.table_row(table)
    resumed = P < req.length  # a sampled request readmitted: its last token is the first step's input
    if graphs is not None and graphs.bucket(n) is not None:
        m = max(0, min(s + n, P - 1) - s)
        heads = prefix[s + 1 : s + 1 + m]
        if chunk.last and not resumed and not req.sampled:  # the token and the join in the graph
            staged = loop.rows.join(req.id, Joined(prefix[P - 1], 0, None, P), None, None)
            _, _, token = graphs.run(s, chunk.tokens, heads, row, "join", (staged, prefix[P - 1], P))
            return _first(loop, req, token)
        hidden, logits, _ = graphs.run(s, chunk.tokens, heads, row, "last" if chunk.last else "mid")
    else:
        hidden, logits = _eager(loop, req, chunk, upload(torch.tensor(row, dtype=torch.int32), dev)[None], block)
    if not chunk.last:
        return None
    if resumed:
        token = upload(torch.tensor([prefix[P]], dtype=torch.int32), dev)
    elif req.sampled:  # drawn as the engine's prefill draws it (serving/sampling.py)
        token = first_token(req, whole_rows(model, logits), P)
    else:
        token = model.greedy_tokens(logits).to(torch.int32)
    # the first step's state from the prefill on the device (the bonus as the forward left it), before the
    # host reads the token for the scheduler
    joined = Joined(prefix[P - 1], prefix[P] if resumed else 0, None if block else hidden[n - 1], P)
    loop.rows.join(req.id, joined, token, None if block else loop.engine.verify_hidden)
    if resumed:  # baseline's host copies take the bonus from the Joined
        return None
    return _first(loop, req, token)


def _first(loop, req: Request, token: torch.Tensor) -> int | FirstToken:
    """The last chunk's token for the scheduler: read a step late (``late_first``) or now."""
    if loop.late_first:  # read after the next step is launched (loop.py)
        return FirstToken(token)
    bonus = int(token[0])
    loop.rows.joined[req.id].bonus = bonus
    return bonus
