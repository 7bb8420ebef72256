"""Prefill chunks replayed from graphs captured by padded row count.

Run eagerly, a prefill chunk of a few hundred rows or fewer is bound by the host's launches: the
device finishes each kernel before the next is launched and idles between them, and after the
chunk's last kernel it idles again while the host prepares the next decode step (the serving
profile counts that idle before a join or a leave).  ``PrefillGraphs`` captures, at set-up, a
chunk's device work for each bucket of rows (``BUCKETS`` up to the loop's prefill budget): the
target forward, the MTP head's K/V (or a block draft's context K/V) and, for a request's last
chunk, the LM head over its last row.  A chunk of ``n`` rows then costs the host one upload and
one replay, in the smallest bucket that holds it:

* the upload is one int64 vector (``pack``): the chunk's start, rows and head rows, the
  attention metadata, the block table and the tokens; positions and slots are computed in the
  graph from it;
* a padding row (``i >= n``; for the head ``i >= m``) sits at the chunk's last position and
  writes nothing (slot -1); its outputs are never read;
* a chunk longer than the largest bucket runs eagerly (its device time hides the launches).

What stays eager: the hybrid target's prefill (its linear-state slots, ``state_slots.py``), a
tensor-parallel target, the head cache's position 0 cleared before a request's first chunk, and
everything after the forward (the token, the join): ``prefill.py``.

The capture's warm-ups run over padding alone (every slot -1), so set-up writes no cache.  On the
CPU the same padded body runs eagerly: the tests hold it to the eager chunk's outputs there.
"""

from __future__ import annotations

import torch

from ...runtime.semantics import slot
from ..graphs import CapturedGraph
from ..proposers import BlockProposer
from .rows import upload

__all__ = ["BUCKETS", "PrefillGraphs", "buckets_for", "unsupported"]

# rows of the captured chunks: fine steps where padding costs most, none past 512 rows (longer chunks
# keep the device busy longer than their launches take)
BUCKETS = (16, 32, 64, 128, 192, 256, 384, 512)
# the packed upload: start, rows, head rows, qsl (0, n), kv length, head qsl (0, m), head kv length, last row
S, N, M, QSL, KV, HQSL, HKV, LAST = 0, 1, 2, 3, 5, 6, 8, 9
META = 10


def buckets_for(max_rows: int) -> tuple[int, ...]:
    """The buckets a loop with a prefill budget of ``max_rows`` tokens captures: ``BUCKETS`` up to it, and the
    budget itself when it falls between two of them."""
    out = [b for b in BUCKETS if b <= max_rows]
    if max_rows < BUCKETS[-1] and max_rows not in out:
        out.append(max_rows)
    return tuple(out)


def unsupported(loop) -> str | None:
    """Why ``loop``'s prefill chunks run eagerly (None: they can replay graphs)."""
    from ...models.tp import VocabParallelHead

    if loop.hybrid:
        return "a hybrid target's prefill carries linear-state slots"
    if isinstance(loop.model, VocabParallelHead):
        return "a tensor-parallel target"
    return None


class PrefillGraphs:
    """The captured prefill chunks of ``loop`` (a ``ServingLoop``), by bucket and by whether the chunk is a
    request's last (only the last runs the LM head)."""

    def __init__(self, loop, buckets: tuple[int, ...]):
        if not buckets:
            raise ValueError("prefill graphs need at least one bucket")
        self.loop, self.buckets = loop, tuple(sorted(buckets))
        self.rows = self.buckets[-1]
        dev, BT = loop.device, loop.block_table_width
        self.block = isinstance(loop.engine.proposer, BlockProposer)
        self.packed = torch.zeros(META + BT + 2 * self.rows, dtype=torch.long, device=dev)
        self.arange = torch.arange(self.rows, device=dev)
        self.outputs: dict[tuple[int, bool], tuple] = {}
        self.graphs: dict[tuple[int, bool], CapturedGraph] = {}
        self.replays = 0
        self.pool = torch.cuda.graph_pool_handle() if dev.type == "cuda" else None

    # ------------------------------------------------------------------ set-up
    def capture(self) -> None:
        """Every bucket's two graphs, over padding rows (nothing written)."""
        loop = self.loop
        empty = [-1] * loop.block_table_width
        for rows in self.buckets:
            for last in (False, True):
                # a chunk of 0 rows at position 0: every row is padding, every slot -1
                self.packed.copy_(self.pack(0, 0, 0, empty, [], [], rows))
                self.graphs[(rows, last)] = CapturedGraph(self._body(rows, last), loop.device, self.pool)

    def bucket(self, n: int) -> int | None:
        """The smallest bucket of at least ``n`` rows (None: longer than every bucket)."""
        return next((b for b in self.buckets if b >= n), None)

    # --------------------------------------------------------------------- run
    def pack(self, start: int, n: int, m: int, table: list[int], tokens, head_tokens, rows: int) -> torch.Tensor:
        """The host vector one chunk uploads: ``n`` rows at ``start``, ``m`` head rows, its block table."""
        meta = [start, n, m, 0, n, start + n, 0, m, start + 1 + m, max(n - 1, 0)]
        pad = [0] * (self.rows - len(tokens))
        hpad = [0] * (self.rows - len(head_tokens))
        return torch.tensor(meta + list(table) + list(tokens) + pad + list(head_tokens) + hpad, dtype=torch.long)

    def run(self, start: int, tokens, head_tokens, table: list[int], last: bool):
        """A chunk of ``len(tokens)`` rows at ``start`` over block table ``table`` (host values), whose head rows
        take ``head_tokens``: ``(hidden, logits)`` as the eager chunk gives them (``hidden`` padded to the
        bucket, None for a block draft; ``logits`` the last row's, ``[1, V]``, for a last chunk)."""
        n = len(tokens)
        rows = self.bucket(n)
        if rows is None or n < 1:
            raise ValueError(f"a chunk of {n} rows has no bucket (buckets: {self.buckets})")
        self.packed.copy_(
            upload(self.pack(start, n, len(head_tokens), table, tokens, head_tokens, rows), self.loop.device),
            non_blocking=True,
        )
        self.graphs[(rows, last)]()
        self.replays += 1
        return self.outputs[(rows, last)]

    def _body(self, rows: int, last: bool):
        """The device work of a chunk in bucket ``rows``, reading only ``packed``."""
        loop, p, BT, BS = self.loop, self.packed, self.loop.block_table_width, self.loop.block_size
        model, head = loop.model, loop.head

        def body() -> None:
            s, n, m = p[S], p[N], p[M]
            bt = p[META : META + BT].to(torch.int32).view(1, BT)
            toks = p[META + BT : META + BT + rows]
            ar = self.arange[:rows]
            pos = s + torch.minimum(ar, (n - 1).clamp(min=0))
            slots = torch.where(ar < n, slot(bt, pos[None], BS).reshape(-1), -1)
            qsl, kv, logit_rows = p[QSL : QSL + 2], p[KV : KV + 1], (p[LAST : LAST + 1] if last else slice(0, 0))
            if self.block:
                draft = loop.engine.proposer.draft
                _, logits, taps = model(
                    toks, pos, slots, bt, kv, qsl, rows, taps=draft.tap_layers, logit_rows=logit_rows
                )
                draft.write_context(taps, pos, slots)
                self.outputs[(rows, last)] = (None, logits)
                return
            hidden, logits = model(toks, pos, slots, bt, kv, qsl, rows, logit_rows=logit_rows)
            hidden = head.from_target(hidden)
            hrows = p[META + BT + self.rows : META + BT + self.rows + rows]
            hpos = s + 1 + torch.minimum(ar, (m - 1).clamp(min=0))
            hslots = torch.where(ar < m, slot(bt, hpos[None], BS).reshape(-1), -1)
            head(hrows, hpos, hslots, hidden, bt, p[HKV : HKV + 1], p[HQSL : HQSL + 2], rows, slice(0, 0))
            self.outputs[(rows, last)] = (hidden, logits)

        return body
