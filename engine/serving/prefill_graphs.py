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
* a greedy request's last chunk also takes its token in the graph and writes its held staging row
  (``BatchRows.join``: the repair token, the token, count 0, the length, the MTP's hidden row), and a
  request's first chunk clears the MTP head's position 0; what is left to the host is the token's
  copy to pinned memory (``prefill.FirstToken``);
* a chunk longer than the largest bucket replays the largest bucket's ``mid`` graph piece by piece and its
  own kind over the rest (``prefill.prefill_chunk``), as if the scheduler had cut it so: no chunk length
  meets a shape the capture did not compile.

What stays eager: the hybrid target's prefill (its linear-state slots, ``state_slots.py``), a
tensor-parallel target, and after a sampled or a resumed request's last chunk the token and the join
(``prefill.py``).

The capture's warm-ups run over padding alone (every slot -1), so set-up writes no cache.  On the
CPU the same padded body runs eagerly: the tests hold it to the eager chunk's outputs there.
"""

from __future__ import annotations

import torch

from ...runtime.semantics import slot
from ..graphs import CapturedGraph
from ..proposers import BlockProposer

__all__ = ["BUCKETS", "PrefillGraphs", "buckets_for", "unsupported"]

# rows of the captured chunks: fine steps where padding costs most, none past 512 rows (a longer chunk
# replays 512-row pieces)
BUCKETS = (16, 32, 64, 128, 192, 256, 384, 512)
# the packed upload: start, rows, head rows, qsl (0, n), kv length, head qsl (0, m), head kv length, last row,
# and for a join the staging row, the prefix's last token and the length
S, N, M, QSL, KV, HQSL, HKV, LAST, ROW, LAST_TOKEN, LENGTH = 0, 1, 2, 3, 5, 6, 8, 9, 10, 11, 12
META = 13
# a chunk before a request's last; a last chunk (its logits); a greedy request's last chunk, whose graph also takes
# the token (the argmax) and writes the request's held staging row (``BatchRows.join``)
KINDS = ("mid", "last", "join")


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
    """The captured prefill chunks of ``loop`` (a ``ServingLoop`` whose ``rows`` exist), by bucket and kind
    (``KINDS``)."""

    def __init__(self, loop, buckets: tuple[int, ...]):
        if not buckets:
            raise ValueError("prefill graphs need at least one bucket")
        self.loop, self.buckets = loop, tuple(sorted(buckets))
        self.rows = self.buckets[-1]
        dev, BT = loop.device, loop.block_table_width
        self.block = isinstance(loop.engine.proposer, BlockProposer)
        self.packed = torch.zeros(META + BT + 2 * self.rows, dtype=torch.long, device=dev)
        self.arange = torch.arange(self.rows, device=dev)
        if not self.block:  # the head's K and V at position 0: zeros
            k, _ = loop.head.kv_cache.layer_storage(0)
            self.zeros = torch.zeros_like(k[:1])
        self.outputs: dict[tuple[int, str], tuple] = {}
        self.graphs: dict[tuple[int, str], CapturedGraph] = {}
        self.replays = 0
        self.pool = torch.cuda.graph_pool_handle() if dev.type == "cuda" else None

    # ------------------------------------------------------------------ set-up
    def capture(self) -> None:
        """Every bucket's graphs, over padding rows (no cache written); a join's warm-ups write a free held
        slot's staging row, which the next join to it writes again."""
        loop = self.loop
        free = loop.rows.stage.row_of_slot(loop.rows.stage.free[0])
        for rows in self.buckets:
            for kind in KINDS:
                # a chunk of 0 rows at position 1: every row is padding, every slot -1
                self._upload(self.pack(1, 0, 0, [-1] * loop.block_table_width, [], [], (free, 0, 0)))
                self.graphs[(rows, kind)] = CapturedGraph(self._body(rows, kind), loop.device, self.pool)

    def bucket(self, n: int) -> int | None:
        """The smallest bucket of at least ``n`` rows (None: longer than every bucket)."""
        return next((b for b in self.buckets if b >= n), None)

    # --------------------------------------------------------------------- run
    def pack(self, start: int, n: int, m: int, table: list[int], tokens, head_tokens, join=(0, 0, 0)) -> torch.Tensor:
        """The host vector one chunk uploads: ``n`` rows at ``start``, ``m`` head rows, its block table, and for a
        join ``(staging row, the prefix's last token, length)``."""
        meta = [start, n, m, 0, n, start + n, 0, m, start + 1 + m, max(n - 1, 0), *join]
        pad = [0] * (self.rows - len(tokens))
        hpad = [0] * (self.rows - len(head_tokens))
        return torch.tensor(meta + list(table) + list(tokens) + pad + list(head_tokens) + hpad, dtype=torch.long)

    def _upload(self, host: torch.Tensor) -> None:
        cuda = self.packed.device.type == "cuda"
        self.packed.copy_(host.pin_memory() if cuda else host, non_blocking=cuda)

    def run(self, start: int, tokens, head_tokens, table: list[int], kind: str, join=(0, 0, 0)):
        """A chunk of ``len(tokens)`` rows at ``start`` over block table ``table`` (host values), whose head rows
        take ``head_tokens``: ``(hidden, logits, token)`` (``hidden`` padded to the bucket, None for a block
        draft; ``logits`` the last row's ``[1, V]`` after a last chunk; ``token`` the argmax ``[1]`` int32 after a
        ``join``, whose ``join`` is ``(staging row, the prefix's last token, length)``)."""
        n = len(tokens)
        rows = self.bucket(n)
        if rows is None or n < 1:
            raise ValueError(f"a chunk of {n} rows has no bucket (buckets: {self.buckets})")
        if kind not in KINDS:
            raise ValueError(f"a chunk's kind is one of {KINDS}, not {kind!r}")
        self._upload(self.pack(start, n, len(head_tokens), table, tokens, head_tokens, join))
        self.graphs[(rows, kind)]()
        self.replays += 1
        return self.outputs[(rows, kind)]

    def _body(self, rows: int, kind: str):
        """The device work of a chunk in bucket ``rows``, reading only ``packed``."""
        loop, p, BT, BS = self.loop, self.packed, self.loop.block_table_width, self.loop.block_size
        model, head, stage = loop.model, loop.head, loop.rows.stage

        def body() -> None:
            s, n, m = p[S], p[N], p[M]
            bt = p[META : META + BT].to(torch.int32).view(1, BT)
            toks = p[META + BT : META + BT + rows]
            ar = self.arange[:rows]
            pos = s + torch.minimum(ar, (n - 1).clamp(min=0))
            slots = torch.where(ar < n, slot(bt, pos[None], BS).reshape(-1), -1)
            qsl, kv = p[QSL : QSL + 2], p[KV : KV + 1]
            logit_rows = slice(0, 0) if kind == "mid" else p[LAST : LAST + 1]
            hidden = None
            if self.block:
                draft = loop.engine.proposer.draft
                _, logits, taps = model(
                    toks, pos, slots, bt, kv, qsl, rows, taps=draft.tap_layers, logit_rows=logit_rows
                )
                draft.write_context(taps, pos, slots)
            else:
                hidden, logits = model(toks, pos, slots, bt, kv, qsl, rows, logit_rows=logit_rows)
                hidden = head.from_target(hidden)
                # a request's first chunk (start 0): the head's position 0 holds zeros, as a new cache does
                zero = torch.where(s == 0, slot(bt, torch.zeros_like(s).view(1, 1), BS).reshape(-1), -1)
                head.kv_cache.write(0, zero, self.zeros, self.zeros)
                hrows = p[META + BT + self.rows : META + BT + self.rows + rows]
                hpos = s + 1 + torch.minimum(ar, (m - 1).clamp(min=0))
                hslots = torch.where(ar < m, slot(bt, hpos[None], BS).reshape(-1), -1)
                head(hrows, hpos, hslots, hidden, bt, p[HKV : HKV + 1], p[HQSL : HQSL + 2], rows, slice(0, 0))
            token = None
            if kind == "join":
                token = model.greedy_tokens(logits).to(torch.int32)
                self._join(stage, token, hidden)
            self.outputs[(rows, kind)] = (hidden, logits, token)

        return body

    def _join(self, stage, token: torch.Tensor, hidden: torch.Tensor | None) -> None:
        """``RowStage.join`` (and the MTP's hidden row) at the packed staging row, in the graph."""
        p, W = self.packed, stage.width
        row = p[ROW : ROW + 1]
        tokens = stage.src("tokens").view(-1, W)
        first = torch.cat([p[LAST_TOKEN : LAST_TOKEN + 1], torch.zeros_like(p[: W - 1])]).to(tokens.dtype)
        tokens.index_copy_(0, row, first[None])
        stage.src("accepted").index_fill_(0, row, 0)
        nlt = stage.src("next_last_token")
        nlt.index_copy_(0, row, token.reshape(1).to(nlt.dtype))
        lens = stage.src("next_seq_lens")
        lens.index_copy_(0, row, p[LENGTH : LENGTH + 1].to(lens.dtype))
        if hidden is not None:
            verify = self.loop.engine.verify_hidden
            verify.index_copy_(0, row * W, hidden.index_select(0, p[LAST : LAST + 1]).to(verify.dtype))
