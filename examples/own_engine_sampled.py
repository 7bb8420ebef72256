"""An engine of its own that samples, driving specgen's runtime on the CPU: sampled verification.

The engine of ``own_engine.py`` (its integer model, paged cache, block table and host draft), now
verifying by speculative rejection sampling: each request has a temperature, a top-k, a top-p and a
seed (one batch mixes greedy and sampled rows), the forward keeps its rows' logits, and the runtime's
sampled tail (``verify-to-draft-sampled``) runs the vocabulary pass the engine hands it as ``sampler``
(``runtime.vocab_pass.VocabPass``: the folder's ``spec_target_sample`` when it has it, else the torch ops),
then the generated rejection rule and the next step's inputs.  The draft proposes its model's argmax, some
spoiled at random as in ``own_engine.py`` (either way a token fixed before the verification: a one-hot ``q``,
``draft_probs`` 1); a draft with a distribution of its own writes ``q(x)`` there.

The runtime works in place here (``step_in_place``): the engine writes each step's inputs and its rows'
sampling parameters into ``runtime.buffers(batch)`` and reads the results from the returned views.
Every random decision is Philox keyed by (row seed, position), so the run is reproduced exactly: at the
end the tokens are checked against a plain host loop of the rule (``runtime.sampling.rejection_verify``
over the same logits, drafts and keys); the script exits 1 on a mismatch.

Build the kernels once (``pip install "specgen[build]"``):

    specgen build --boundary draft-to-verify,verify-to-draft-sampled --widths 4 --block-table-widths 8 \\
        --block-sizes 16 --draft-dtypes int32 \\
        --families spec_verify_head_update,spec_rejection_tail_update,spec_target_sample \\
        --out build/own_sampled_kernels

then run it with the runtime alone:

    python examples/own_engine_sampled.py --kernels build/own_sampled_kernels
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # own_engine.py beside this file
from own_engine import I32, SCRATCH_BLOCK, OwnEngine, arguments, random_prompts, report  # noqa: E402

from specgen.runtime import SpecVerifyRuntime, capabilities_of, load_library  # noqa: E402
from specgen.runtime.sampling import SamplingParams, SamplingTensors, rejection_verify, row_weights  # noqa: E402
from specgen.runtime.vocab_pass import VocabPass  # noqa: E402

SCALE = 2000.0  # the model's integer scores over this are its logits (a few units apart)
PARAMS = (SamplingParams(0.8, 0, 0.9, 11), SamplingParams(0.0), SamplingParams(1.2, 8, 1.0, -4))


class SampledEngine(OwnEngine):
    """``OwnEngine`` whose forward also keeps its rows' logits, for the vocabulary pass (``vocab``, the sampler)."""

    def __init__(self, args, library=None):
        super().__init__(args)
        self.vocab = VocabPass(library, self.width, args.max_batch * self.width, args.vocab, "cpu")

    def scores(self, tokens: torch.Tensor, positions: torch.Tensor, before: torch.Tensor) -> torch.Tensor:
        """Each row's logits: the model's integer scores over ``SCALE``, in float32 (the same bits on every path)."""
        m = self.model
        before = torch.where(before < 0, torch.full_like(before, m.vocab), before)
        return ((m.token[tokens] + m.position[positions] + m.before[before]) @ m.head).float() / SCALE

    def model_forward(self, bufs) -> torch.Tensor:
        tokens, positions = bufs["tokens"].long(), bufs["positions"].long()
        slots, table = bufs["slot_mapping"].long(), bufs["block_table"].long()
        keep = slots >= 0
        self.cache[slots[keep]] = tokens[keep]
        b = torch.arange(tokens.numel()) // self.width
        p = (positions - 1).clamp(min=0)
        before = self.cache[table[b, p // self.block_size] * self.block_size + p % self.block_size]
        before = torch.where(positions > 0, before, torch.full_like(before, -1))
        logits = self.scores(tokens, positions, before)
        self.vocab.keep(logits)
        return logits.argmax(-1).to(I32).view(-1, self.width)  # the sampler overwrites every row's token


def host_rule(args, prompts, first, params, steps) -> list[list[int]]:
    """The same decode as a plain host loop of the rule: the engine's drafts, the logits of each verify row from
    the sequence itself, ``rejection_verify`` with the rows' seeds at their positions."""
    engine = SampledEngine(args)  # a fresh draft generator: the same drafts for the same sequences
    outputs = [[t] for t in first]
    seeds = torch.tensor([p.seed for p in params])
    temp, top_k, top_p = (torch.tensor([getattr(p, n) for p in params]) for n in ("temperature", "top_k", "top_p"))
    for _ in range(steps):
        seqs = [p + o for p, o in zip(prompts, outputs)]
        drafts = engine.draft(seqs)
        rows, lens = [], []
        for b, seq in enumerate(seqs):
            toks = [seq[-1], *drafts[b].tolist()]
            pos = torch.arange(len(seq) - 1, len(seq) - 1 + args.width)
            before = torch.tensor([seq[-2] if len(seq) > 1 else -1, *toks[:-1]])
            rows.append(engine.scores(torch.tensor(toks), pos, before))
            lens.append(len(seq) - 1)
        rep = lambda t: t.repeat_interleave(args.width)  # noqa: E731
        target = row_weights(torch.cat(rows), rep(temp), rep(top_k), rep(top_p)).view(len(seqs), args.width)
        ones = torch.ones(len(seqs), args.width - 1)
        acc, emitted = rejection_verify(drafts, ones, None, target, seeds, torch.tensor(lens))
        for b, a in enumerate(acc.tolist()):
            outputs[b] += emitted[b, : a + 1].tolist()
    return outputs


def main(argv=None) -> int:
    args = arguments(__doc__.splitlines()[0], argv)
    library = load_library(args.kernels)
    engine = SampledEngine(args, library)
    runtime = SpecVerifyRuntime(
        library,
        engine.model_forward,
        capabilities_of(engine),
        args.width,
        max_batch=args.max_batch,
        backend="cpu",
        scratch_block=SCRATCH_BLOCK,
        tail="verify-to-draft-sampled",
        sampler=engine.vocab,  # the rows' filtered distributions, p_j(x_j), the uniforms, each row's draw
    )
    prompts = random_prompts(args)
    params = [PARAMS[b % len(PARAMS)] for b in range(args.batch)]
    first = engine.prefill(prompts)  # the first token is the engine's business (here its greedy token)
    outputs = [[t] for t in first]
    last_tokens = torch.tensor(first, dtype=I32)
    seq_lens = torch.tensor([len(p) for p in prompts], dtype=I32)
    bufs, B = runtime.buffers(args.batch), args.batch
    SamplingTensors(*(bufs[n][:B] for n in ("temperature", "top_k", "top_p", "seed"))).fill(params)
    bufs["draft_probs"][:B].fill_(1.0)  # one-hot drafts: q(x) = 1
    drafted = accepted_total = steps = 0
    capacity = args.block_table_width * args.block_size
    while steps < args.steps and int(seq_lens.max()) + args.width < capacity:
        drafts = engine.draft([p + o for p, o in zip(prompts, outputs)])
        for name, value in (("last_tokens", last_tokens), ("draft_tokens", drafts), ("seq_lens", seq_lens)):
            bufs[name][:B].copy_(value)
        bufs["block_table"][:B].copy_(engine.block_table)
        res = runtime.step_in_place(B, (int(seq_lens.min()), int(seq_lens.max())))
        for b, a in enumerate(res.accepted.tolist()):
            outputs[b] += res.next_tokens[b, : a + 1].tolist()
            drafted, accepted_total = drafted + args.width - 1, accepted_total + a
        last_tokens, seq_lens = res.next_last_token.clone(), res.next_seq_lens.clone()
        steps += 1

    expected = host_rule(args, prompts, first, params, steps)
    run = f"own sampling engine: {steps} steps, batch {B} (bucket {args.max_batch}), width {args.width}"
    vocab = f"vocabulary pass: {'spec_target_sample (built)' if engine.vocab.kernel is not None else 'torch ops'}"
    acceptance = accepted_total / max(drafted, 1)
    return report(run, runtime.stats(), steps, outputs, expected, acceptance, "the rule's host loop", [vocab])


if __name__ == "__main__":
    sys.exit(main())
