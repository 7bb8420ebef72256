"""``runtime.vocab_pass.VocabPass``, an engine's sampler: the built family (``spec_target_sample``, and the dense
one for drafts with whole distributions) writes the same bits as the torch ops, whatever rows a step has."""

from __future__ import annotations

import pytest
import torch

from specgen.runtime import VocabPass
from specgen.runtime.sampling import SamplingParams, SamplingTensors

W, V = 4, 300
PARAMS = [SamplingParams(0.8, 0, 0.9, 3), SamplingParams(0.0), SamplingParams(1.3, 6, 1.0, -11)]
OUTS = ("target_tokens", "target_draft_probs", "accept_uniforms")


def _bufs(batch: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    bufs = {
        "draft_tokens": torch.randint(-2, V + 2, (batch, W - 1), generator=gen, dtype=torch.int32),  # some outside
        "draft_probs": torch.rand(batch, W - 1, generator=gen),
        "seq_lens": torch.randint(0, 500, (batch,), generator=gen, dtype=torch.int32),
        "target_tokens": torch.zeros(batch, W, dtype=torch.int32),
        "target_draft_probs": torch.zeros(batch, W - 1),
        "accept_uniforms": torch.zeros(batch, W - 1),
    }
    t = SamplingTensors.empty(batch).fill([PARAMS[b % 3] for b in range(batch)])
    return bufs | {n: getattr(t, n) for n in ("temperature", "top_k", "top_p", "seed")}


@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("tiles", [False, True])
def test_the_built_pass_equals_the_torch_ops(sampling_kernels, dense, tiles):
    """With ``tiles``, the family that reads logit tiles, its rows given them (``logit_tiles_of``) as a producer
    writes them, or unset where ``keep`` copied the logits in."""
    from specgen.runtime.vocab_pass import logit_tiles_of

    gen = torch.Generator().manual_seed(7)
    built = VocabPass(sampling_kernels, W, 4 * W, V, "cpu", dense=dense, tiles=tiles)
    torch_ops = VocabPass(sampling_kernels, W, 4 * W, V, "cpu", dense=dense, kernels=False)
    assert built.kernel is not None and torch_ops.kernel is None
    for batch in (1, 3, 4):  # a bucket's leading rows: fewer rows than the pass holds
        logits = torch.randn(batch * W, V, generator=gen) * 3
        dists = torch.softmax(torch.randn(W - 1, batch, V, generator=gen), -1) if dense else None
        outs = []
        for vocab in (built, torch_ops):
            vocab.keep(logits)
            if vocab.tiles is not None and batch > 1:  # written in place by a producer of tiles
                vocab.logits[: batch * W].copy_(logits)
                vocab.tiles[: batch * W] = logit_tiles_of(logits)
            bufs = _bufs(batch, torch.Generator().manual_seed(batch))
            vocab(bufs, dists)
            outs.append({n: bufs[n] for n in OUTS})
        for n in OUTS:
            assert torch.equal(outs[0][n], outs[1][n]), (dense, batch, n)
        assert outs[0]["target_tokens"].ne(0).any()


def test_a_folder_without_the_family_and_a_dense_pass_without_distributions():
    vocab = VocabPass(None, W, W, V, "cpu", dense=True)
    assert vocab.kernel is None
    with pytest.raises(ValueError, match="pass draft_dists"):
        vocab(_bufs(1, torch.Generator().manual_seed(0)))


def test_logit_tiles_of_says_what_each_64_tokens_hold():
    """Per 64 tokens: the float bits of the largest non-NaN logit (low half, unsigned) and how many are not NaN
    (high half); a tile of NaNs holds -inf and 0; the row's last, short tile counts only its tokens."""
    from specgen.runtime.vocab_pass import logit_tiles_of, logit_tiles_unset
    from specgen.specializations.vocab_sample import LOGIT_TILE

    x = torch.randn(2, 150)
    x[0, :64] = float("nan")
    x[0, 70] = float("-inf")
    x[1, 65] = float("nan")
    x[1, 140] = 50.0
    x[1, 3] = -0.5
    tiles = logit_tiles_of(x)
    assert LOGIT_TILE == 64 and tiles.shape == (2, 3) and tiles.dtype == torch.int64
    top = (tiles & 0xFFFFFFFF).to(torch.int32).view(torch.float32)
    count = tiles >> 32
    assert count.tolist() == [[0, 64, 22], [64, 63, 22]]
    assert top[0, 0] == float("-inf") and top[1, 2] == 50.0 and (tiles >= 0).all()
    for r in range(2):
        for q in range(3):
            part = x[r, 64 * q : 64 * q + 64]
            part = part[~part.isnan()]
            assert part.numel() == 0 or top[r, q] == part.max()
    unset = logit_tiles_unset(3, 150, "cpu")
    assert unset.shape == (3, 3) and (unset == -1).all()


def test_rows_the_pass_copies_are_unset(sampling_kernels):
    """Logits ``keep`` copies in come from no producer of tiles: their rows are unset, others stay as written."""
    from specgen.runtime.vocab_pass import logit_tiles_of

    vocab = VocabPass(sampling_kernels, W, 2 * W, V, "cpu", tiles=True)
    assert vocab.kernel.key() == "spec_target_sample_tiles__any"
    assert vocab.tiles.shape == (2 * W, -(-V // 64)) and (vocab.tiles == -1).all()
    vocab.tiles.copy_(logit_tiles_of(torch.randn(2 * W, V)))
    vocab.keep(vocab.logits[:W])  # written in place: nothing copied, the tiles stand
    assert (vocab.tiles[:, 0] >= 0).all()
    vocab.keep(torch.randn(W, V))
    assert (vocab.tiles[:W, 0] == -1).all() and (vocab.tiles[W:, 0] >= 0).all()
    assert VocabPass(sampling_kernels, W, W, V, "cpu", kernels=False, tiles=True).tiles is None  # torch ops: none
    plain = VocabPass(sampling_kernels, W, W, V, "cpu")  # tiles not asked for: the family that reads none
    assert plain.tiles is None and plain.kernel.key() == "spec_target_sample__any"
