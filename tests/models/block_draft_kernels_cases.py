"""Block drafts on the target's fast kernels (``forward_kernels="triton"``: ``cuda_forward.argmax`` and the skinny
GEMM) against the torch choice; run as a script (``device``), prints JSON.  A child process, so
``TRITON_INTERPRET=1`` (the CPU) never leaks into a CUDA run.

Every weight and logit is a small integer (or a multiple of 1/4), so both GEMMs are exact and the two choices
must give the same drafts bit for bit, ties included (the lowest index wins)."""

from __future__ import annotations

import json
import sys

import torch

from specgen.models import Qwen3Model
from specgen.models.block_draft import BlockDraft, BlockDraftConfig, MarkovHead


def integral(module: torch.nn.Module, gen: torch.Generator, lo: int = -3, hi: int = 4) -> None:
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randint(lo, hi, p.shape, generator=gen).to(p.dtype) / 4)


def main(device: str) -> dict:
    gen = torch.Generator().manual_seed(7)
    bad, checks = [], 0
    for batch, rows, vocab, rank in ((1, 7, 50, 4), (3, 3, 4099, 16), (17, 2, 300, 8)):
        head = MarkovHead(vocab, rank).to(device)
        integral(head, gen)
        logits = torch.randint(-2, 3, (batch, rows, vocab), generator=gen).float().to(device)  # many ties
        anchor = torch.randint(0, vocab, (batch,), generator=gen).to(device)
        want = head.chain(logits, anchor, "torch")
        got = head.chain(logits, anchor, "triton")
        checks += 1
        if not torch.equal(got, want) or got.dtype != want.dtype:
            bad.append(["chain", batch, rows, vocab, want.tolist(), got.tolist()])
    target = Qwen3Model.create("tiny", seed=0, device=device)
    vocab = target.config.vocab_size
    for kind in ("dflash", "dspark"):
        draft = BlockDraft.create(target, BlockDraftConfig.default(kind, target.config.num_layers, vocab), seed=1)
        draft = draft.to(device)
        if kind == "dspark":
            integral(draft.markov_head, gen)
        for batch in (1, 4):
            anchor = torch.randint(0, vocab, (batch,), generator=gen).to(device)
            rows = draft.rows(3)
            logits = torch.randint(-2, 3, (batch, rows, vocab), generator=gen).float().to(device)
            draft.forward = lambda *args, logits=logits: logits  # the block's logits, fixed: the choice is the test
            out = {}
            for kernels in ("torch", "triton"):
                target.forward_kernels = kernels
                out[kernels] = draft.propose(anchor, torch.full((batch,), 5, device=device), None, 3)
            target.forward_kernels = "auto"
            checks += 1
            if not torch.equal(out["torch"], out["triton"]) or out["torch"].shape != (batch, 3):
                bad.append([kind, batch, out["torch"].tolist(), out["triton"].tolist()])
    return {"checks": checks, "bad": bad}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
