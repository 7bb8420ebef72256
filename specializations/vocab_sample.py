"""The vocabulary pass of sampled verification as kernel families (docs/kernels.md, "The vocabulary pass").

``C`` blocks of ``VOCAB_THREADS`` threads per row (``C``, a run-time dimension read from the
``vocab_parts`` workspace, is the caller's choice) read the row's logits a few times, each block its
chunk of the row's tiles, and write its filtered distribution and its draw; every sum is an integer
sum of the weights of ``runtime/sampling.py`` (``row_weights``, ``draw``, ``residual_weights``), so the
kernels equal that torch semantics bit for bit whatever order their lanes and chunks add in.

* ``spec_target_sample``: a sampling verify step's ``B * W`` rows; drafts given as the one-hot
  ``q(x)`` (greedy, block and mixed drafts).
* ``spec_target_sample_dense``: the same with each draft's whole distribution ``draft_dists``
  (a sampling draft) in place of ``draft_probs``, laid out ``(W - 1, B, V)`` so that draft ``j``'s
  rows are one block.
* ``spec_target_sample_tiles``, ``spec_target_sample_dense_tiles``: the two above with ``logit_tiles`` after
  ``logits``: what the logits' producer (the LM head) says of each ``LOGIT_TILE`` tokens, the largest non-NaN
  logit and the count of non-NaN ones, so that the pass need not read the row for them (a row whose entry 0 is
  negative is unset: the pass reads its logits).
* ``spec_draft_sample``: a sampling draft's own draw (``runtime.sampling.draft_sample``) for ``B``
  rows, its distribution written in place (one ``draft_dists[j]``).

No plan step launches them: the sampling engine's vocabulary pass does, so they are companions of
the sampled tails' plans. Importing ``specgen.specializations`` registers them.
"""

from __future__ import annotations

from .families import COMPANIONS, ArgSpec, Family, register

__all__ = [
    "DRAFT_SAMPLE",
    "LOGIT_TILE",
    "MAX_VOCAB_TOKENS",
    "TARGET_SAMPLE",
    "TARGET_SAMPLE_DENSE",
    "TARGET_SAMPLE_DENSE_TILES",
    "TARGET_SAMPLE_TILES",
    "NO_RESULT",
    "VOCAB_FAMILIES",
    "VOCAB_SUMS",
    "VOCAB_THREADS",
    "WORKSPACE",
    "vocab_chunks",
]

TARGET_SAMPLE, TARGET_SAMPLE_DENSE, DRAFT_SAMPLE = "spec_target_sample", "spec_target_sample_dense", "spec_draft_sample"
# the target families that take the logits' producer's tiles (``logit_tiles``) for each row's largest logit
TARGET_SAMPLE_TILES, TARGET_SAMPLE_DENSE_TILES = f"{TARGET_SAMPLE}_tiles", f"{TARGET_SAMPLE_DENSE}_tiles"
VOCAB_FAMILIES = (TARGET_SAMPLE, TARGET_SAMPLE_DENSE, DRAFT_SAMPLE, TARGET_SAMPLE_TILES, TARGET_SAMPLE_DENSE_TILES)
VOCAB_THREADS = 1024  # lanes per row: one histogram bin per lane (10 bits of a weight per round)
MAX_TILES = 512  # the draw's per-tile sums of THREADS tokens each, in shared memory
MAX_VOCAB_TOKENS = MAX_TILES * VOCAB_THREADS  # a longer vocabulary is refused; the kernels write nothing
# a row's int64 sums (the template's slots): the barrier count, the blocks done, Z, 4 top-k and 4 top-p
# histograms of VOCAB_THREADS bins, the tiles' D and W sums
VOCAB_SUMS = 2 * VOCAB_THREADS + 8 * VOCAB_THREADS
WORKSPACE = ("vocab_parts", "vocab_sums")  # written by the kernels, no result: see docs/kernels.md
# arguments the kernels write whose contents on return are no result (the target families' scratch rows too)
NO_RESULT = ("vocab_parts", "vocab_scratch")


def vocab_chunks(rows: int, vocab: int, blocks: int) -> int:
    """``C``, the blocks per row for ``rows`` rows of ``vocab`` tokens when ``blocks`` blocks of
    ``VOCAB_THREADS`` lanes can be resident at once (a CUDA device: one per SM): each row's blocks wait
    for each other, so ``rows * C`` must not pass ``blocks``; a chunk gets at least two tiles."""
    tiles = -(-max(vocab, 1) // VOCAB_THREADS)
    return max(1, min(tiles // 2, blocks // max(rows, 1)))


_PARAMS = (
    ArgSpec("temperature", "float32", "(B,)"),
    ArgSpec("top_k", "int32", "(B,)"),
    ArgSpec("top_p", "float32", "(B,)"),
    ArgSpec("seed", "int64", "(B,)"),
)
_DRAFTS = ArgSpec("draft_tokens", "int32", "(B, W - 1)")
LOGIT_TILE = 64  # tokens a logit tile summarises (``logit_tiles``: the producer's largest logit and count per tile)
_TARGET_IN = (*_PARAMS, ArgSpec("seq_lens", "int32", "(B,)"), ArgSpec("logits", "float32", "(B * W, V)"))
_TILES = ArgSpec("logit_tiles", "int64", f"(B * W, (V + {LOGIT_TILE - 1}) // {LOGIT_TILE})")
_TARGET_OUT = (
    ArgSpec("target_tokens", "int32", "(B, W)", True),
    ArgSpec("target_draft_probs", "float32", "(B, W - 1)", True),
    ArgSpec("accept_uniforms", "float32", "(B, W - 1)", True),
    ArgSpec("vocab_scratch", "float32", "(B * W, V)", True),
    ArgSpec("vocab_parts", "int64", "(B * W, C, 4)", True),
    ArgSpec("vocab_sums", "int64", f"(B * W, {VOCAB_SUMS})", True),
)

_TARGET_ARGS = {
    TARGET_SAMPLE: (_DRAFTS, ArgSpec("draft_probs", "float32", "(B, W - 1)"), *_TARGET_IN, *_TARGET_OUT),
    TARGET_SAMPLE_DENSE: (_DRAFTS, *_TARGET_IN, ArgSpec("draft_dists", "float32", "(W - 1, B, V)"), *_TARGET_OUT),
}
_TARGET_ARGS[TARGET_SAMPLE_TILES] = (*_TARGET_ARGS[TARGET_SAMPLE][:8], _TILES, *_TARGET_ARGS[TARGET_SAMPLE][8:])
_TARGET_ARGS[TARGET_SAMPLE_DENSE_TILES] = (
    *_TARGET_ARGS[TARGET_SAMPLE_DENSE][:7],
    _TILES,
    *_TARGET_ARGS[TARGET_SAMPLE_DENSE][7:],
)

for _family in (
    *(
        Family(name, (), args, guards=(), threads_per="block", rows="B * W", threads=VOCAB_THREADS)
        for name, args in _TARGET_ARGS.items()
    ),
    Family(
        DRAFT_SAMPLE,
        (),
        (
            *_PARAMS,
            ArgSpec("sample_positions", "int64", "(B,)"),
            ArgSpec("draft_logits", "float32", "(B, V)"),
            ArgSpec("sampled_tokens", "int64", "(B,)", True),
            ArgSpec("sampled_probs", "float32", "(B,)", True),
            ArgSpec("draft_dist", "float32", "(B, V)", True),
            ArgSpec("vocab_parts", "int64", "(B, C, 4)", True),
            ArgSpec("vocab_sums", "int64", f"(B, {VOCAB_SUMS})", True),
        ),
        guards=(),
        threads_per="block",
        rows="B",
        threads=VOCAB_THREADS,
    ),
):
    register(_family)
# a sampling draft (MTP: verify-to-draft) needs all three; a block draft's drafts are one-hot (context-kv)
COMPANIONS["verify-to-draft-sampled"] = (*COMPANIONS.get("verify-to-draft-sampled", ()), *VOCAB_FAMILIES)
COMPANIONS["context-kv-sampled"] = (*COMPANIONS.get("context-kv-sampled", ()), TARGET_SAMPLE, TARGET_SAMPLE_TILES)
