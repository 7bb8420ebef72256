"""SpecVerifyRuntime on a sampled tail: the vocabulary pass as its sampler, then spec_rejection_verify; the fast path,
the eager fallback and the host rule agree, and the runtime refuses what it cannot run."""

from __future__ import annotations

import pytest
import torch

from specgen.runtime.capabilities import SpeculativeVerifyCapabilities
from specgen.runtime.sampling import SamplingParams, SamplingTensors, rejection_verify, sample_rows, target_weights_of
from specgen.runtime.verify_graph import SpecVerifyRuntime

W, BT, BS, VOCAB = 4, 8, 16, 24
I32 = torch.int32
ON = SpeculativeVerifyCapabilities(supports_in_graph_input_update=True, block_size=BS, block_table_width=BT)
PARAMS = [
    SamplingParams(0.8, 0, 0.9, 3),
    SamplingParams(0.0),
    SamplingParams(1.3, 6, 1.0, -11),
    SamplingParams(1.0, 0, 1.0, 2**40),
    SamplingParams(0.5, 3, 0.7, 8),
]


class ToyTarget:
    """A deterministic target: logits from each row's token and position; ``sampler`` reads the last ones."""

    def __init__(self):
        self.logits = torch.zeros(8 * W, VOCAB)
        self.table = torch.randn(VOCAB + 200, VOCAB, generator=torch.Generator().manual_seed(3)) * 2

    def forward(self, bufs):
        rows = bufs["tokens"].long() + bufs["positions"].long() % 200
        logits = self.table[rows]
        self.logits[: logits.shape[0]].copy_(logits)
        return logits.argmax(-1).to(I32).view(-1, W)

    def sampler(self, bufs):
        sample_rows(bufs, self.logits)


def _inputs(rt, batch, gen):
    bufs = rt.buffers(batch)
    bufs["last_tokens"][:batch].copy_(torch.randint(0, VOCAB, (batch,), generator=gen, dtype=I32))
    bufs["draft_tokens"][:batch].copy_(torch.randint(0, VOCAB, (batch, W - 1), generator=gen, dtype=I32))
    bufs["seq_lens"][:batch].copy_(torch.randint(0, 60, (batch,), generator=gen, dtype=I32))
    bufs["block_table"][:batch].copy_(torch.randint(1, 64, (batch, BT), generator=gen, dtype=I32))
    bufs["draft_probs"][:batch].copy_(torch.rand(batch, W - 1, generator=gen) * 0.9 + 0.1)
    SamplingTensors(*(bufs[n][:batch] for n in ("temperature", "top_k", "top_p", "seed"))).fill(PARAMS[:batch])
    return bufs


def test_fast_path_eager_path_and_host_rule_agree(sampling_kernels):
    toy = ToyTarget()
    rt = SpecVerifyRuntime(
        sampling_kernels, toy.forward, ON, W, max_batch=8, tail="verify-to-draft-sampled", sampler=toy.sampler
    )
    names = [s.name for s in rt.sequence]
    assert names[names.index("target_forward") + 1 :][:2] == ["sample_rows", "spec_rejection_tail_update__w4_bt8_bs16"]
    gen = torch.Generator().manual_seed(5)
    for batch in (1, 3, 5):
        bufs = _inputs(rt, batch, gen)
        saved = {n: t.clone() for n, t in bufs.items()}
        seq = bufs["seq_lens"][:batch]
        fast = rt.step_in_place(batch, (int(seq.min()), int(seq.max())))
        assert fast.fast_path
        fast = {n: getattr(fast, n).clone() for n in ("accepted", "next_tokens", "next_last_token", "next_seq_lens")}
        # the host rule over the same logits, drafts, q(x) and keys
        target = target_weights_of({n: t[:batch] for n, t in bufs.items()}, toy.logits)
        acc, emitted = rejection_verify(
            saved["draft_tokens"][:batch],
            saved["draft_probs"][:batch],
            None,
            target,
            saved["seed"][:batch],
            saved["seq_lens"][:batch],
        )
        assert torch.equal(fast["accepted"], acc) and torch.equal(fast["next_tokens"], emitted)
        for n, t in saved.items():
            bufs[n].copy_(t)
        eager = rt.step_in_place(batch, (0, 10_000))  # outside the guarded domain: the eager path
        assert eager.reason == "guard_failed"
        for n, want in fast.items():
            assert torch.equal(getattr(eager, n), want), n
    assert rt.stats()["fast_path"] == 3 and rt.stats()["fallback"] == {"guard_failed": 3}


def test_a_sampled_tail_needs_its_sampler_and_works_in_place(sampling_kernels):
    toy = ToyTarget()
    with pytest.raises(ValueError, match="needs sampler"):
        SpecVerifyRuntime(sampling_kernels, toy.forward, ON, W, tail="verify-to-draft-sampled")
    with pytest.raises(ValueError, match="takes no sampler"):
        SpecVerifyRuntime(sampling_kernels, toy.forward, ON, W, sampler=toy.sampler, allow_eager=True)
    rt = SpecVerifyRuntime(sampling_kernels, toy.forward, ON, W, tail="context-kv-sampled", sampler=toy.sampler)
    args = (torch.zeros(1, dtype=I32), torch.zeros(1, W - 1, dtype=I32), torch.zeros(1, dtype=I32))
    with pytest.raises(ValueError, match="works in place"):
        rt.step(*args, torch.ones(1, BT, dtype=I32))
