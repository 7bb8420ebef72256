"""An inference engine of its own, driving specgen's runtime on the CPU.

Nothing here comes from specgen's reference application.  The "model" is integer
arithmetic, so every path computes the same bits: the embedding of a row's token, plus
one of its position, plus one of the token at the position before it, times a linear
head, then greedy.  The token before is read back from the engine's own paged cache
(one entry per position, written at the slots the runtime computes) through the
engine's own block table.  The draft is the same model run ahead one token at a time on
the host, with some drafts spoiled on purpose so that the acceptance varies.

Each step hands the runtime the committed token, the drafts, the sequence lengths and
the block table; the runtime runs the head updates (tokens, positions, slots, KV
lengths, tiling), calls ``model_forward`` over its persistent buffers, then the greedy
acceptance and the next step's inputs, with the kernels of the folder.  At the end the
tokens are checked against a plain greedy loop on the host: the script exits 1 on a
mismatch.  It imports ``specgen.runtime`` and torch only.

Build the kernels once (that needs the compiler, ``pip install "specgen[build]"``):

    specgen build --boundary draft-to-verify,verify-to-draft --widths 4 --block-table-widths 8 \\
        --block-sizes 16 --draft-dtypes int32 \\
        --families spec_verify_head_update,spec_verify_tail_update --out build/own_kernels

then run it with the runtime alone:

    python examples/own_engine.py --kernels build/own_kernels
"""

from __future__ import annotations

import argparse
import sys

import torch

from specgen.runtime import SpeculativeVerifyCapabilities, SpecVerifyRuntime, capabilities_of, load_library

I32, I64 = torch.int32, torch.int64
SCRATCH_BLOCK = 0  # no sequence owns it: the runtime's padding rows and rejected repair writes land there


class TinyModel:
    """``next(token at p) = argmax(head . (E[token] + P[p] + Q[token at p - 1]))``, in int64."""

    def __init__(self, vocab: int, dim: int, max_positions: int, seed: int):
        g = torch.Generator().manual_seed(seed)

        def table(rows: int, cols: int) -> torch.Tensor:
            return torch.randint(-50, 51, (rows, cols), generator=g, dtype=I64)

        self.vocab = vocab
        self.token = table(vocab, dim)
        self.position = table(max_positions, dim)
        self.before = table(vocab + 1, dim)  # row ``vocab``: no token before (position 0)
        self.head = table(dim, vocab)

    def next_token(self, token: torch.Tensor, position: torch.Tensor, before: torch.Tensor) -> torch.Tensor:
        """The greedy next token of each row; ``before`` is -1 where there is no token before."""
        before = torch.where(before < 0, torch.full_like(before, self.vocab), before)
        hidden = self.token[token] + self.position[position] + self.before[before]
        return (hidden @ self.head).argmax(-1)  # exact integers: the first of equal maxima, on every path

    def one(self, token: int, position: int, before: int) -> int:
        """``next_token`` of a single row, on the host."""
        return int(self.next_token(torch.tensor([token]), torch.tensor([position]), torch.tensor([before])))


class OwnEngine:
    """The engine: its model, its paged cache and block table, its draft and its decode loop."""

    def __init__(self, args):
        self.width, self.block_size, self.table_width = args.width, args.block_size, args.block_table_width
        self.model = TinyModel(args.vocab, 16, self.table_width * self.block_size, args.seed)
        # the engine's allocator: block 0 is the scratch block, the others go to the sequences shuffled
        blocks = args.batch * self.table_width
        order = torch.randperm(blocks, generator=torch.Generator().manual_seed(args.seed + 1)) + 1
        self.block_table = order.view(args.batch, self.table_width).to(I32)
        self.cache = torch.full(((blocks + 1) * self.block_size,), -1, dtype=I64)  # a token per slot
        self.spoil, self.gen = args.spoil, torch.Generator().manual_seed(args.seed + 2)

    # The opt-in: the forward reads only the step buffers, so the runtime may update them in its
    # graph; the layout is the cache's.  Without this attribute every step runs eagerly.
    @property
    def speculative_verify_capabilities(self) -> SpeculativeVerifyCapabilities:
        return SpeculativeVerifyCapabilities(
            supports_in_graph_input_update=True, block_size=self.block_size, block_table_width=self.table_width
        )

    def slot(self, b: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        table = self.block_table.to(I64)
        return table[b, position // self.block_size] * self.block_size + position % self.block_size

    def model_forward(self, bufs) -> torch.Tensor:
        """The target forward over the runtime's buffers: ``target_tokens`` [B, W] (B is the bucket's)."""
        tokens, positions = bufs["tokens"].long(), bufs["positions"].long()  # row b * W + j
        slots, table = bufs["slot_mapping"].long(), bufs["block_table"].long()
        keep = slots >= 0  # -1: no write
        self.cache[slots[keep]] = tokens[keep]  # this verification's entries (rejected ones are rewritten later)
        b = torch.arange(tokens.numel()) // self.width
        p = (positions - 1).clamp(min=0)
        before = self.cache[table[b, p // self.block_size] * self.block_size + p % self.block_size]
        before = torch.where(positions > 0, before, torch.full_like(before, -1))
        return self.model.next_token(tokens, positions, before).to(I32).view(-1, self.width)

    def prefill(self, prompts: list[list[int]]) -> list[int]:
        """Write every prompt token's entry; the first generated token of each sequence."""
        bonus = []
        for b, prompt in enumerate(prompts):
            pos = torch.arange(len(prompt))
            self.cache[self.slot(torch.full_like(pos, b), pos)] = torch.tensor(prompt)
            before = prompt[-2] if len(prompt) > 1 else -1
            bonus.append(self.model.one(prompt[-1], len(prompt) - 1, before))
        return bonus

    def draft(self, sequences: list[list[int]]) -> torch.Tensor:
        """``W - 1`` drafts per sequence: the model run ahead on the host, some drafts spoiled."""
        out = torch.empty(len(sequences), self.width - 1, dtype=I32)
        for b, seq in enumerate(sequences):
            before, token = seq[-2], seq[-1]
            for j in range(self.width - 1):
                pos = len(seq) - 1 + j
                nxt = self.model.one(token, pos, before)
                if float(torch.rand((), generator=self.gen)) < self.spoil:
                    nxt = int(torch.randint(self.model.vocab, (), generator=self.gen))
                out[b, j] = nxt
                before, token = token, nxt
        return out


def greedy(model: TinyModel, prompt: list[int], n: int) -> list[int]:
    """Plain greedy decoding on the host, one token at a time: the tokens the runtime must reproduce."""
    seq = list(prompt)
    while len(seq) < len(prompt) + n:
        before = seq[-2] if len(seq) > 1 else -1
        seq.append(model.one(seq[-1], len(seq) - 1, before))
    return seq[len(prompt) :]


def arguments(description: str, argv=None) -> argparse.Namespace:
    """The command line of this example (and of ``own_engine_sampled.py``)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--kernels", required=True, help="a folder `specgen build` wrote (target c)")
    ap.add_argument("--width", type=int, default=4, help="verify width W: the committed token and W - 1 drafts")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--block-table-width", type=int, default=8)
    ap.add_argument("--batch", type=int, default=3)
    ap.add_argument("--max-batch", type=int, default=4, help="the runtime's largest bucket (the rest are padding)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--vocab", type=int, default=64)
    ap.add_argument("--spoil", type=float, default=0.3, help="probability that a draft is replaced at random")
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


def random_prompts(args) -> list[list[int]]:
    """``args.batch`` prompts of 4 to 11 random tokens, from ``args.seed``."""
    gen = torch.Generator().manual_seed(args.seed + 3)
    lengths = torch.randint(4, 12, (args.batch,), generator=gen).tolist()
    return [torch.randint(args.vocab, (n,), generator=gen).tolist() for n in lengths]


def main(argv=None) -> int:
    args = arguments(__doc__.splitlines()[0], argv)
    engine = OwnEngine(args)
    runtime = SpecVerifyRuntime(
        load_library(args.kernels),
        engine.model_forward,
        capabilities_of(engine),
        args.width,
        max_batch=args.max_batch,
        backend="cpu",
        scratch_block=SCRATCH_BLOCK,
    )
    prompts = random_prompts(args)
    outputs = [[t] for t in engine.prefill(prompts)]
    last_tokens = torch.tensor([o[0] for o in outputs], dtype=I32)
    seq_lens = torch.tensor([len(p) for p in prompts], dtype=I32)  # positions with an entry in the cache
    drafted = accepted_total = 0
    steps = 0
    capacity = args.block_table_width * args.block_size
    while steps < args.steps and int(seq_lens.max()) + args.width < capacity:  # else the table is full
        drafts = engine.draft([p + o for p, o in zip(prompts, outputs)])
        bounds = (int(seq_lens.min()), int(seq_lens.max()))  # the host's bookkeeping: no device read needed
        res = runtime.step(last_tokens, drafts, seq_lens, engine.block_table, seq_len_bounds=bounds)
        for b, a in enumerate(res.accepted.tolist()):
            outputs[b] += res.next_tokens[b, : a + 1].tolist()  # the accepted drafts, then the bonus
            drafted, accepted_total = drafted + args.width - 1, accepted_total + a
        last_tokens, seq_lens = res.next_last_token.clone(), res.next_seq_lens.clone()
        steps += 1

    expected = [greedy(engine.model, p, len(o)) for p, o in zip(prompts, outputs)]
    run = f"own engine: {steps} steps, batch {args.batch} (bucket {args.max_batch}), width {args.width}"
    return report(
        run, runtime.stats(), steps, outputs, expected, accepted_total / max(drafted, 1), "plain greedy decoding"
    )


def report(run: str, stats: dict, steps: int, outputs, expected, acceptance: float, check: str, notes=()) -> int:
    """Print the run's figures and whether its tokens equal ``expected`` (``check`` names them); the exit status:
    0, or 1 on a mismatch (each differing sequence printed to stderr)."""
    print(f"{run}: {sum(map(len, outputs))} tokens, acceptance {acceptance:.2f}")
    print(f"fast path: {stats['fast_path']} of {steps} steps; fallback: {stats['fallback'] or 'none'}")
    for line in notes:
        print(line)
    same = outputs == expected
    print(f"tokens equal {check}: {same}")
    for b, (o, e) in enumerate(zip(outputs, expected)):
        if o != e:
            print(f"  sequence {b}: runtime  {o}\n  sequence {b}: expected {e}", file=sys.stderr)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
