"""The vocabulary pass of a sampled verify step, ready for an engine's ``sampler``.

A runtime on a sampled tail (``tail="verify-to-draft-sampled"``) calls ``sampler(bufs)`` after the
target forward.  ``VocabPass`` is that sampler: it holds the float32 logits of up to ``rows``
verify rows (the forward writes them: ``keep``), and runs the generated family
``spec_target_sample`` (or ``spec_target_sample_dense`` for a draft with whole distributions) when
the kernel folder has it, one launch with its workspace; otherwise ``sampling.sample_rows``, the
same bits as torch ops::

    vocab = VocabPass(load_library(folder), width=4, rows=max_batch * 4, vocab_size=V, device="cuda")
    def model_forward(bufs):
        ...; vocab.keep(logits); return logits.argmax(-1)
    rt = SpecVerifyRuntime(lib, model_forward, caps, 4, tail="verify-to-draft-sampled", sampler=vocab)

A producer that writes the logits in place may write their tiles too (``tiles``, ``logit_tiles_of``'s layout:
the verify LM head's skinny GEMM does, ``cuda_forward.lm_head(..., tiles=)``); the family then takes each row's
largest logit from them instead of a pass over the row.  Rows that ``keep`` copies, and those of a producer that
writes no tiles, are unset (``unset_tiles``).

The family reads each row's logits once per phase with ``C`` blocks per row that wait for each
other, so ``C`` is picked for every row's blocks to be resident at once (one block per SM on a
CUDA device; ``specializations.vocab_sample.vocab_chunks``).
"""

from __future__ import annotations

from typing import Mapping

import torch

from ..specializations.vocab_sample import (
    LOGIT_TILE,
    MAX_VOCAB_TOKENS,
    TARGET_SAMPLE,
    TARGET_SAMPLE_DENSE,
    TARGET_SAMPLE_DENSE_TILES,
    TARGET_SAMPLE_TILES,
    VOCAB_SUMS,
    vocab_chunks,
)
from .sampling import sample_rows

__all__ = ["SAMPLE_PARAMS", "VocabPass", "logit_tiles_of", "logit_tiles_unset", "vocab_workspace"]

SAMPLE_PARAMS = ("temperature", "top_k", "top_p", "seed")


def logit_tiles_unset(rows: int, vocab: int, device) -> torch.Tensor:
    """A target family's ``logit_tiles`` for ``rows`` rows of ``vocab`` logits, every row unset (-1: the pass
    reads the logits for their largest one)."""
    return torch.full((rows, -(-vocab // LOGIT_TILE)), -1, dtype=torch.int64, device=device)


def logit_tiles_of(logits: torch.Tensor) -> torch.Tensor:
    """The tiles a producer writes of float32 ``logits[R, V]``: per ``LOGIT_TILE`` tokens, the float bits of the
    largest non-NaN logit (low 32 bits, as unsigned; -inf where there is none) and how many are not NaN (high 32
    bits).  The torch form of what ``models/skinny_gemm.py`` writes beside the logits."""
    rows, vocab = logits.shape
    n = -(-vocab // LOGIT_TILE)
    x = torch.full((rows, n * LOGIT_TILE), float("nan"), dtype=torch.float32, device=logits.device)
    x[:, :vocab] = logits
    x = x.view(rows, n, LOGIT_TILE)
    nan = x.isnan()
    top = x.masked_fill(nan, float("-inf")).amax(-1)
    bits = top.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    return ((~nan).sum(-1).to(torch.int64) << 32) | bits


def vocab_workspace(rows: int, vocab: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """A vocabulary family's workspace for up to ``rows`` rows: ``vocab_parts`` (its shape says ``C``, the blocks
    per row: on a CUDA device as many as are resident with every row's blocks at once, one per SM; on the CPU
    one) and ``vocab_sums``, zero as the kernels leave it.  A bucket's leading rows keep the same ``C``, so
    the blocks of a smaller batch stay resident too."""
    device = torch.device(device)
    blocks = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else rows
    chunks = vocab_chunks(rows, vocab, blocks)
    parts = torch.zeros(rows, chunks, 4, dtype=torch.int64, device=device)
    return parts, torch.zeros(rows, VOCAB_SUMS, dtype=torch.int64, device=device)


class VocabPass:
    """A sampled tail's ``sampler``: the generated vocabulary family when ``library`` has it, else the torch ops.

    ``rows``: the most verify rows a step has (``max_batch * width``); ``dense``: the drafts carry their whole
    distributions (``draft_dists``, laid out ``(W - 1, B, V)``), else they are one-hot (``draft_probs``);
    ``kernels=False`` keeps the torch ops (an A/B); ``tiles``: the family that reads the producer's logit tiles
    (``spec_target_sample[_dense]_tiles``, with ``self.tiles`` for the producer to write; ``None`` where the pass
    reads no tiles).
    """

    def __init__(
        self, library, width: int, rows: int, vocab_size: int, device, *, dense=False, kernels=True, tiles=False
    ):
        f32 = dict(dtype=torch.float32, device=device)
        self.width, self.dense = int(width), bool(dense)
        self.logits = torch.zeros(rows, vocab_size, **f32)  # the family reads float32 logits
        usable = library is not None and kernels and vocab_size <= MAX_VOCAB_TOKENS
        family = TARGET_SAMPLE_DENSE if dense else TARGET_SAMPLE
        read_tiles = TARGET_SAMPLE_DENSE_TILES if dense else TARGET_SAMPLE_TILES
        if tiles and usable and library.has(read_tiles, width):  # a folder built without it: the plain family
            family = read_tiles
        self.kernel = library.get(family, width) if usable and library.has(family, width) else None
        self.tiles = None  # the producer's logit tiles (logit_tiles_of), written beside the logits or unset
        if self.kernel is not None:
            self.scratch = torch.zeros(rows, vocab_size, **f32)
            self.workspace = vocab_workspace(rows, vocab_size, device)
            self.tiles = logit_tiles_unset(rows, vocab_size, device) if family == read_tiles else None

    def keep(self, logits: torch.Tensor) -> None:
        """The target forward's verify-row logits ``[n, V]`` (any float dtype), into the pass's first ``n`` rows;
        nothing to copy when the forward wrote them there (``logits`` is that view of ``self.logits``)."""
        rows = self.logits[: logits.shape[0]]
        if logits.data_ptr() != rows.data_ptr() or logits.dtype != rows.dtype or logits.shape != rows.shape:
            rows.copy_(logits)
            self.unset_tiles(logits.shape[0])

    def unset_tiles(self, n: int) -> None:
        """Mark the first ``n`` rows' logit tiles unset: their logits came from elsewhere than the producer that
        writes the tiles (the pass then reads the logits for their largest one)."""
        if self.tiles is not None:
            self.tiles[:n, 0].fill_(-1)

    def __call__(self, bufs: Mapping[str, torch.Tensor], draft_dists: torch.Tensor | None = None) -> None:
        """The pass over the step buffers ``bufs`` of ``B`` rows (and, when ``dense``, ``draft_dists[W - 1, B, V]``):
        ``target_tokens``, ``target_draft_probs`` and ``accept_uniforms`` written in place."""
        batch, width = bufs["target_tokens"].shape
        if self.dense and draft_dists is None:
            raise ValueError("a dense vocabulary pass reads the drafts' distributions: pass draft_dists")
        dists = draft_dists if self.dense else None
        if self.kernel is None or (dists is not None and not dists.is_contiguous()):  # a bucket of a dense step
            sample_rows(bufs, self.logits, None if dists is None else dists.transpose(0, 1))
            return
        names = ("draft_tokens",) + (("draft_probs",) if dists is None else ()) + SAMPLE_PARAMS + ("seq_lens",)
        rows = batch * width
        tiles = [] if self.tiles is None else [self.tiles[:rows]]
        ins = [bufs[n] for n in names] + [self.logits[:rows], *tiles] + ([] if dists is None else [dists])
        outs = [bufs[n] for n in ("target_tokens", "target_draft_probs", "accept_uniforms")]
        parts, sums = self.workspace
        self.kernel(*ins, *outs, self.scratch[:rows], parts[:rows], sums[:rows])
