"""A sampling engine's state: the requests' sampling parameters, the target's verify logits, the draft's q.

``SpecDecodeEngine(..., sampling=...)`` verifies by speculative rejection sampling
(``docs/kernels.md``, "Sampled verification") instead of greedy prefix acceptance.
``sampling`` is one ``SamplingParams`` for every row or one per row; a row at
temperature 0 is greedy, so one batch mixes greedy and sampled rows.  Without it
(``None``) the engine is the greedy engine, op for op.

* The parameters live in the step buffers (``temperature``, ``top_k``, ``top_p``,
  ``seed``: persistent tensors the verify and draft graphs read), written at set-up
  and by ``SpecDecodeEngine.set_sampling`` between steps, so a change takes effect
  at the next step and never recaptures a graph.
* The target forward keeps its verify rows' logits (``keep_logits``); the sampling
  tail's vocabulary pass (``sampler``: ``runtime.vocab_pass.VocabPass``) reads them.
* A draft that samples (the MTP chain without ``--acceptance``) writes each drafted
  token's ``q(x)`` into ``draft_probs`` and its whole filtered distribution into
  ``dists`` (the residual needs it); over a reduced draft vocabulary (``draft_vocab``)
  its pass reads the subset's logits alone and writes ``q`` into the subset's columns
  (the others stay 0); a draft that does not (block drafts, drafts
  replaced by an ``AcceptanceMix``, or ``draft_sampling="argmax"``: the MTP chain
  proposing its argmax) is the one-hot case, ``draft_probs`` 1: no vocabulary pass
  per drafted token, and a draft is kept with probability ``p(x)`` instead of
  ``min(1, p(x) / q(x))``, still lossless.
* The token after each prompt (the prefill's) is sampled too (``first_tokens``), keyed below the verify
  steps' keys; greedy rows take the argmax as before.
* ``host_verify`` is ``baseline``'s host implementation of the rule
  (``runtime.sampling.rejection_verify`` on host tensors).
"""

from __future__ import annotations

import os
from typing import Sequence

import torch

from ..models.errors import EngineError
from ..runtime.sampling import (
    Filtered,
    SamplingParams,
    SamplingTensors,
    draft_sample,
    first_tokens,
    rejection_verify,
    target_weights_of,
)
from ..runtime.vocab_pass import SAMPLE_PARAMS, VocabPass, vocab_workspace
from ..specializations.vocab_sample import DRAFT_SAMPLE

__all__ = ["DRAFT_SAMPLING", "EngineSampling", "SamplingParams", "sampling_rows", "whole_rows"]

I32 = torch.int32
VOCAB_KERNELS_ENV = "SPECGEN_VOCAB_KERNELS"  # 0: the vocabulary pass as torch ops in specgen mode too
LOGITS_OUT_ENV = "SPECGEN_LOGITS_OUT"  # 0: the verify head writes its own tensor, copied into the pass's rows (an A/B)
# the verify head writes its logits' tiles and the pass reads them (spec_target_sample[_dense]_tiles) instead of a
# pass over each row for its largest logit; 0: the plain families, the head writes none (an A/B)
LOGIT_TILES_ENV = "SPECGEN_LOGIT_TILES"
DRAFT_SAMPLING = ("sample", "argmax")  # a sampling draft draws from its own q, or proposes its argmax (one-hot)


def sampling_rows(sampling, batch: int) -> list[SamplingParams] | None:
    """``sampling`` (None, one ``SamplingParams`` or ``batch`` of them) as one per row; ``EngineError`` otherwise."""
    if sampling is None:
        return None
    rows = [sampling] * batch if isinstance(sampling, SamplingParams) else list(sampling)
    if len(rows) != batch or not all(isinstance(p, SamplingParams) for p in rows):
        raise EngineError(f"sampling must be one SamplingParams or {batch} of them (one per row)")
    return rows


class EngineSampling:
    """The sampling state of one ``SpecDecodeEngine``; see the module docstring."""

    def __init__(self, engine, params: Sequence[SamplingParams], draft_sampling: str = "sample"):
        self.engine, self.params, self.draft_sampling = engine, list(params), draft_sampling
        self.logits = self.dists = self.draft_vocab = None

    @property
    def draft_samples(self) -> bool:
        """Whether the draft samples from its own filtered distribution (else its drafts are one-hot)."""
        e = self.engine
        return e.proposer.samples and e.acceptance is None and self.draft_sampling == "sample"

    def setup(self) -> None:
        """The buffers a run needs (after the step buffers exist), and the parameters written into them.

        In specgen mode, with a build that has them, the vocabulary pass and a sampling draft's draws are the
        generated families (``spec_target_sample[_dense]``, ``spec_draft_sample``: one launch each); the other
        modes, a build without them and ``SPECGEN_VOCAB_KERNELS=0`` run the same semantics as torch ops.
        """
        e = self.engine
        vocab = e.model.config.vocab_size
        f32 = dict(dtype=torch.float32, device=e.device)
        if self.draft_samples:  # draft j's rows are one contiguous block: what spec_target_sample_dense reads
            self.dists = torch.zeros(e.width - 1, e.batch, vocab, **f32)
        self.draft_kernel = None
        # a sampling MTP head over a draft vocabulary: its draws read the subset's N logits (models/draft_vocab.py)
        self.draft_vocab = getattr(e.proposer.module, "draft_vocab", None) if self.draft_samples else None
        width = vocab if self.draft_vocab is None else self.draft_vocab.size
        wanted = os.environ.get(VOCAB_KERNELS_ENV, "1") != "0"
        lib = e.library if e.strategy.name == "specgen" and wanted else None
        tiles = os.environ.get(LOGIT_TILES_ENV, "1") != "0"
        self.vocab = VocabPass(lib, e.width, e.batch * e.width, vocab, e.device, dense=self.draft_samples, tiles=tiles)
        self.logits, self.target_kernel = self.vocab.logits, self.vocab.kernel
        if self.target_kernel is not None and self.draft_samples and lib.has(DRAFT_SAMPLE, e.width):
            self.draft_kernel = lib.get(DRAFT_SAMPLE, e.width)
            self.draft_logits = torch.zeros(e.batch, width, **f32)
            self.drawn = torch.zeros(e.batch, dtype=torch.int64, device=e.device)
            self.drawn_probs = torch.zeros(e.batch, **f32)
            self.draft_dist = None if self.draft_vocab is None else torch.zeros(e.batch, width, **f32)
            self.draft_workspace = vocab_workspace(e.batch, width, e.device)
        self.write(self.params)

    def write(self, params: Sequence[SamplingParams]) -> None:
        """Write one ``SamplingParams`` per row into the step buffers, in place."""
        b = self.engine.bufs
        self.params = list(params)
        SamplingTensors(b["temperature"], b["top_k"], b["top_p"], b["seed"]).fill(self.params)
        self.host = SamplingTensors.of(self.params)  # baseline's host copy

    def verify_kwargs(self, rows: int) -> dict:
        """The target forward's keywords for a verification of ``rows`` rows: ``logits_out``, the vocabulary
        pass's float32 rows, where the LM head writes the logits (``VocabPass.keep`` then copies nothing); none
        for a tensor-parallel target (each rank holds a vocabulary range, gathered by ``keep_logits``) or more
        rows than the pass holds, or with ``SPECGEN_LOGITS_OUT=0``.  With the generated pass that reads tiles (not
        under ``SPECGEN_LOGIT_TILES=0``), ``logit_tiles_out`` too: the head writes the rows' logit tiles there or
        marks them unset."""
        whole = getattr(self.engine.model, "whole_logits", None)
        off = os.environ.get(LOGITS_OUT_ENV, "1") == "0"
        if off or whole is not None or self.logits is None or rows > self.logits.shape[0]:
            return {}
        kwargs = {"logits_out": self.logits[:rows]}
        if self.vocab.tiles is not None:
            kwargs["logit_tiles_out"] = self.vocab.tiles[:rows]
        return kwargs

    def keep_logits(self, logits: torch.Tensor) -> None:
        """The target forward's verify-row logits, for the vocabulary pass (a tensor-parallel target's vocabulary
        ranges gathered into whole rows: ``whole_logits``)."""
        whole = getattr(self.engine.model, "whole_logits", None)
        if whole is None:
            self.vocab.keep(logits)
        else:
            whole(logits, out=self.logits[: logits.shape[0]])
            self.vocab.unset_tiles(logits.shape[0])

    def sampler(self, bufs) -> None:
        """The sampling tail's vocabulary pass over ``bufs`` (``runtime.vocab_pass.VocabPass``: the generated
        family, or ``runtime.sampling.sample_rows``, the same bits as torch ops)."""
        batch = bufs["target_tokens"].shape[0]
        self.vocab(bufs, None if self.dists is None else self.dists[:, :batch])

    def draft(self, logits: torch.Tensor, positions: torch.Tensor, index: int, vocab=None) -> torch.Tensor:
        """Draft ``index`` of every row of a sampling draft (``draft_samples``) from the draft's ``logits[B, V]``
        at the drafted tokens' ``positions``: a draw from the row's filtered distribution whose ``q(x)`` and ``q``
        go to ``draft_probs`` and ``dists``.  With the head's ``vocab`` (a ``DraftVocab``, the one set-up saw) the
        logits are ``[B, N]``: the draw maps back to a token id and ``q`` fills the subset's columns.  A one-hot
        draft takes the argmax instead (the proposer's own argmax kernel), and ``draft_probs`` stays 1."""
        if not self.draft_samples:
            raise EngineError("EngineSampling.draft: this engine's drafts are one-hot; take the argmax")
        if vocab is not self.draft_vocab:
            raise EngineError("EngineSampling.draft: the draft's draft_vocab changed after the engine's set-up")
        b, n = self.engine.bufs, logits.shape[0]
        dists = self.dists[index, :n]  # leading rows: contiguous
        if self.draft_kernel is not None and n == b["temperature"].shape[0] <= self.drawn.shape[0]:
            self.draft_logits[:n].copy_(logits)
            params = [b[k] for k in SAMPLE_PARAMS]
            pos = positions.to(torch.int64).expand(n).contiguous()
            drawn, probs = self.drawn[:n], self.drawn_probs[:n]
            dist = dists if vocab is None else self.draft_dist[:n]
            parts, sums = self.draft_workspace
            self.draft_kernel(*params, pos, self.draft_logits[:n], drawn, probs, dist, parts[:n], sums[:n])
            b["draft_probs"][:, index].copy_(probs)
            return _placed(drawn.clone(), dist, dists, vocab)  # the next draft overwrites ``drawn``
        x, qx, q = draft_sample(logits, b, positions)
        b["draft_probs"][:n, index].copy_(qx)
        return _placed(x, q, dists, vocab)

    def first_tokens(self, logits: torch.Tensor) -> torch.Tensor:
        """The token after each prompt from the prefill's last rows' ``logits[B, V]``, sampled like every other
        token (``runtime.sampling.first_tokens``: the argmax on a greedy row)."""
        return first_tokens(whole_rows(self.engine.model, logits), self.engine.bufs, self.engine.prompt_lens)

    def target_weights(self, bufs) -> Filtered:
        """``p_j`` of the verify rows as weights (``baseline`` computes them on the device, then reads them)."""
        return target_weights_of(bufs, self.logits)

    def host_verify(self, h: dict, bufs: dict, weights: torch.Tensor, totals: torch.Tensor) -> None:
        """``baseline``'s acceptance on the host: the rule over the target's weights read back (a host sync),
        the drafts' ``q`` and the rows' seeds at positions ``seq_lens``; leaves ``accepted``, ``next_tokens``
        and, at index ``accepted``, the new token in ``target_tokens`` in ``h``."""
        target = Filtered(weights.cpu(), totals.cpu())
        dists = None if self.dists is None else self.dists.transpose(0, 1).cpu()
        acc, emitted = rejection_verify(
            h["draft_tokens"], bufs["draft_probs"].cpu(), dists, target, self.host.seed, h["seq_lens"]
        )
        h["accepted"].copy_(acc)
        h["next_tokens"].copy_(emitted)
        h["target_tokens"].scatter_(1, acc.long()[:, None], emitted.gather(1, acc.long()[:, None]))


def _placed(x: torch.Tensor, q: torch.Tensor, dists: torch.Tensor, vocab) -> torch.Tensor:
    """A draft's draw ``x`` as token ids, its ``q`` in ``dists`` (the whole row's columns): as they are without a
    draft vocabulary (``q`` copied unless it is ``dists`` already), else mapped back and scattered into the subset's
    columns (``DraftVocab.tokens`` and ``scatter``)."""
    if vocab is None:
        if q.data_ptr() != dists.data_ptr():
            dists.copy_(q)
        return x
    vocab.scatter(dists, q)
    return vocab.tokens(x)


def whole_rows(model, logits: torch.Tensor) -> torch.Tensor:
    """``logits`` over the whole vocabulary: as they are, or a tensor-parallel target's ranges gathered."""
    whole = getattr(model, "whole_logits", None)
    return logits if whole is None else whole(logits)
