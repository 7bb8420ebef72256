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
def test_the_built_pass_equals_the_torch_ops(sampling_kernels, dense):
    gen = torch.Generator().manual_seed(7)
    built = VocabPass(sampling_kernels, W, 4 * W, V, "cpu", dense=dense)
    torch_ops = VocabPass(sampling_kernels, W, 4 * W, V, "cpu", dense=dense, kernels=False)
    assert built.kernel is not None and torch_ops.kernel is None
    for batch in (1, 3, 4):  # a bucket's leading rows: fewer rows than the pass holds
        logits = torch.randn(batch * W, V, generator=gen) * 3
        dists = torch.softmax(torch.randn(W - 1, batch, V, generator=gen), -1) if dense else None
        outs = []
        for vocab in (built, torch_ops):
            vocab.keep(logits)
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
