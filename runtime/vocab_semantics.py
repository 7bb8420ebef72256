"""The torch semantics of the vocabulary pass's families (``specializations/vocab_sample.py``, docs/kernels.md
"The vocabulary pass"): ``runtime.sampling``'s functions over each family's arguments, registered with the
other families' references (``runtime/semantics.py`` imports them into ``SEMANTICS``)."""

from __future__ import annotations

from ..specializations.vocab_sample import MAX_VOCAB_TOKENS
from .sampling import draft_sample, rejection_inputs, row_params, row_weights


def _target(draft_tokens, draft_probs, temperature, top_k, top_p, seed, seq_lens, logits, dists, outs) -> None:
    target_tokens, target_draft_probs, accept_uniforms, _scratch, _parts, sums = outs
    batch, width = target_tokens.shape
    vocab = logits.shape[1]
    if batch == 0 or vocab > MAX_VOCAB_TOKENS:  # past the kernels' shared tiles: they write nothing
        return
    params = {"temperature": temperature, "top_k": top_k, "top_p": top_p}
    target = row_weights(logits, *row_params(params, width)).view(batch, width)
    got = rejection_inputs(draft_tokens, draft_probs, dists, target, seed, seq_lens)
    for dst, src in zip((target_tokens, target_draft_probs, accept_uniforms), got):
        dst.copy_(src)
    sums.zero_()  # the workspace: zero on return (vocab_parts and vocab_scratch: no result)


def spec_target_sample(draft_tokens, draft_probs, temperature, top_k, top_p, seed, seq_lens, logits, *outs) -> None:
    """A sampling verify step's vocabulary pass with one-hot drafts (``q_j(x_j) = draft_probs``):
    ``runtime.sampling.rejection_inputs`` of the rows' ``row_weights`` (``vocab_scratch``, the kernels' working
    rows, is no result)."""
    _target(draft_tokens, draft_probs, temperature, top_k, top_p, seed, seq_lens, logits, None, outs)


def spec_target_sample_dense(
    draft_tokens, temperature, top_k, top_p, seed, seq_lens, logits, draft_dists, *outs
) -> None:
    """``spec_target_sample`` with each draft's whole distribution ``draft_dists[j, b]`` for its one-hot ``q``."""
    dists = draft_dists.transpose(0, 1)
    _target(draft_tokens, None, temperature, top_k, top_p, seed, seq_lens, logits, dists, outs)  # q(x): in dists


def spec_target_sample_tiles(
    draft_tokens, draft_probs, temperature, top_k, top_p, seed, seq_lens, logits, logit_tiles, *outs
) -> None:
    """``spec_target_sample``: ``logit_tiles`` say of the logits what they say themselves where a row's are set
    (``vocab_pass.logit_tiles_of``), so the semantics read the logits alone."""
    spec_target_sample(draft_tokens, draft_probs, temperature, top_k, top_p, seed, seq_lens, logits, *outs)


def spec_target_sample_dense_tiles(
    draft_tokens, temperature, top_k, top_p, seed, seq_lens, logits, logit_tiles, draft_dists, *outs
) -> None:
    """``spec_target_sample_dense``, its ``logit_tiles`` read as ``spec_target_sample_tiles`` reads them."""
    spec_target_sample_dense(draft_tokens, temperature, top_k, top_p, seed, seq_lens, logits, draft_dists, *outs)


def spec_draft_sample(
    temperature,
    top_k,
    top_p,
    seed,
    sample_positions,
    draft_logits,
    sampled_tokens,
    sampled_probs,
    draft_dist,
    vocab_parts,
    vocab_sums,
) -> None:
    """A sampling draft's draw (``runtime.sampling.draft_sample``, stream 2 at ``sample_positions``): the token,
    its ``q(x)`` and the row's ``q`` into ``draft_dist``."""
    if draft_logits.shape[0] == 0 or draft_logits.shape[1] > MAX_VOCAB_TOKENS:
        return
    params = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed}
    x, qx, q = draft_sample(draft_logits, params, sample_positions)
    sampled_tokens.copy_(x)
    sampled_probs.copy_(qx)
    draft_dist.copy_(q)
    vocab_sums.zero_()
