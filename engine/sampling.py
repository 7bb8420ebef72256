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
  tail's vocabulary pass (``sampler``: ``runtime.sampling.sample_rows``) reads them.
* A draft that samples (the MTP chain without ``--acceptance``) writes each drafted
  token's ``q(x)`` into ``draft_probs`` and its whole filtered distribution into
  ``dists`` (the residual needs it); a draft that does not (block drafts, or drafts
  replaced by an ``AcceptanceMix``) is the one-hot case, ``draft_probs`` 1.
* The token after each prompt (the prefill's) is sampled too (``first_tokens``), keyed below the verify
  steps' keys; greedy rows take the argmax as before.
* ``host_verify`` is ``baseline``'s host implementation of the rule
  (``runtime.sampling.rejection_verify`` on host tensors).
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..models.errors import EngineError
from ..runtime.sampling import (
    SamplingParams,
    SamplingTensors,
    draft_sample,
    first_tokens,
    rejection_verify,
    sample_rows,
    target_probs_of,
)

__all__ = ["EngineSampling", "SamplingParams", "sampling_rows"]

I32 = torch.int32


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

    def __init__(self, engine, params: Sequence[SamplingParams]):
        if hasattr(engine.model, "vocab_lo"):
            raise EngineError("sampled verification needs the whole vocabulary's logits; it does not run with --tp > 1")
        self.engine, self.params = engine, list(params)
        self.logits = self.dists = None

    @property
    def draft_samples(self) -> bool:
        """Whether the draft samples from its own filtered distribution (else its drafts are one-hot)."""
        return self.engine.proposer.samples and self.engine.acceptance is None

    def setup(self) -> None:
        """The buffers a run needs (after the step buffers exist), and the parameters written into them."""
        e = self.engine
        vocab = e.model.config.vocab_size
        dtype = e.model.embed_tokens.weight.dtype
        self.logits = torch.zeros(e.batch * e.width, vocab, dtype=dtype, device=e.device)
        if self.draft_samples:
            self.dists = torch.zeros(e.batch, e.width - 1, vocab, dtype=torch.float32, device=e.device)
        self.write(self.params)

    def write(self, params: Sequence[SamplingParams]) -> None:
        """Write one ``SamplingParams`` per row into the step buffers, in place."""
        b = self.engine.bufs
        self.params = list(params)
        SamplingTensors(b["temperature"], b["top_k"], b["top_p"], b["seed"]).fill(self.params)
        self.host = SamplingTensors.of(self.params)  # baseline's host copy

    def keep_logits(self, logits: torch.Tensor) -> None:
        """The target forward's verify-row logits, for the vocabulary pass."""
        self.logits[: logits.shape[0]].copy_(logits)

    def sampler(self, bufs) -> None:
        """The sampling tail's vocabulary pass (``runtime.sampling.sample_rows``) over ``bufs``."""
        sample_rows(bufs, self.logits, self.dists)

    def draft(self, logits: torch.Tensor, positions: torch.Tensor, index: int) -> torch.Tensor:
        """Draft ``index`` of every row from the draft's ``logits[B, V]`` at the drafted tokens' ``positions``:
        the argmax (one-hot, ``draft_probs`` stays 1), or a draw from the row's filtered distribution whose
        ``q(x)`` and ``q`` go to ``draft_probs`` and ``dists``."""
        if not self.draft_samples:
            return logits.argmax(-1)
        b = self.engine.bufs
        x, qx, q = draft_sample(logits, b, positions)
        b["draft_probs"][: x.shape[0], index].copy_(qx)
        self.dists[: x.shape[0], index].copy_(q)
        return x

    def first_tokens(self, logits: torch.Tensor) -> torch.Tensor:
        """The token after each prompt from the prefill's last rows' ``logits[B, V]``, sampled like every other
        token (``runtime.sampling.first_tokens``: the argmax on a greedy row)."""
        return first_tokens(logits, self.engine.bufs, self.engine.prompt_lens)

    def target_probs(self, bufs) -> torch.Tensor:
        """``p_j`` of the verify rows (``baseline`` computes them on the device, then reads them)."""
        return target_probs_of(bufs, self.logits)

    def host_verify(self, h: dict, bufs: dict, probs: torch.Tensor) -> None:
        """``baseline``'s acceptance on the host: the rule over the target's ``probs`` read back (a host sync),
        the drafts' ``q`` and the rows' seeds at positions ``seq_lens``; leaves ``accepted``, ``next_tokens``
        and, at index ``accepted``, the new token in ``target_tokens`` in ``h``."""
        p = probs.cpu()
        dists = None if self.dists is None else self.dists.cpu()
        acc, emitted = rejection_verify(
            h["draft_tokens"], bufs["draft_probs"].cpu(), dists, p, self.host.seed, h["seq_lens"]
        )
        h["accepted"].copy_(acc)
        h["next_tokens"].copy_(emitted)
        h["target_tokens"].scatter_(1, acc.long()[:, None], emitted.gather(1, acc.long()[:, None]))
