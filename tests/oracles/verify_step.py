"""A verify step on stand-ins for the verify graph's tests: the layout, a deterministic target, drafts of varying
acceptance, random inputs and the whole step from the torch references."""

from __future__ import annotations

import torch

from specgen.runtime import semantics as ref
from specgen.runtime.capabilities import SpeculativeVerifyCapabilities
from specgen.runtime.step_records import RESULT_FIELDS as FIELDS  # the step's results

W, BT, BS = 4, 8, 16
VOCAB = 50
I32 = torch.int32
ON = SpeculativeVerifyCapabilities(supports_in_graph_input_update=True, block_size=BS, block_table_width=BT)


def model_forward(bufs):
    """Deterministic stand-in for the target model: a function of each row's token and position."""
    tokens, positions = bufs["tokens"].long(), bufs["positions"].long()
    return ((tokens * 7 + positions) % VOCAB).to(I32).view(-1, W)


def reference_step(last_tokens, draft_tokens, seq_lens, block_table, block_size=BS, width=W):
    """The whole step from the torch references, independent of the runtime."""
    B = seq_lens.shape[0]
    tokens = torch.empty(B * width, dtype=I32)
    ref.spec_verify_token_update(last_tokens, draft_tokens, tokens)
    positions = torch.empty(B * width, dtype=I32)
    slots = torch.empty(B * width, dtype=I32)
    ref.spec_verify_metadata_update(
        seq_lens,
        block_table,
        positions,
        slots,
        torch.empty(B, dtype=I32),
        torch.empty(B + 1, dtype=I32),
        block_size=block_size,
    )
    target = ((tokens.long() * 7 + positions.long()) % VOCAB).to(I32).view(B, width)
    out = {
        "accepted": torch.empty(B, dtype=I32),
        "next_tokens": torch.empty(B, width, dtype=I32),
        "next_last_token": torch.empty(B, dtype=I32),
        "next_seq_lens": torch.empty(B, dtype=I32),
        "draft_positions": torch.empty(B, 2, dtype=I32),
        "draft_slots": torch.empty(B, 2, dtype=I32),
        "hidden_rows": torch.empty(B, 2, dtype=I32),
    }
    ref.greedy_prefix_verify(draft_tokens, target, out["accepted"], out["next_tokens"])
    ref.prepare_next_draft(
        out["accepted"],
        target,
        seq_lens,
        block_table,
        torch.zeros(1, dtype=I32),
        out["next_last_token"],
        out["next_seq_lens"],
        out["draft_positions"],
        out["draft_slots"],
        out["hidden_rows"],
        block_size=block_size,
    )
    return out


def make_drafts(last_tokens, seq_lens, gen, p_correct, width=W):
    """Drafts that follow the model with probability ``p_correct`` per token, so acceptance varies."""
    B = seq_lens.shape[0]
    drafts = torch.empty(B, width - 1, dtype=I32)
    prev = last_tokens.long()
    for j in range(width - 1):
        right = (prev * 7 + seq_lens.long() + j) % VOCAB
        wrong = torch.randint(0, VOCAB, (B,), generator=gen)
        pick = torch.rand(B, generator=gen) < p_correct
        drafts[:, j] = torch.where(pick, right, wrong).to(I32)
        prev = drafts[:, j].long()
    return drafts


def inputs(B, gen, max_len=100, bt=BT):
    last = torch.randint(0, VOCAB, (B,), generator=gen, dtype=I32)
    seq_lens = torch.randint(0, max_len + 1, (B,), generator=gen, dtype=I32)
    table = torch.randint(1, 64, (B, bt), generator=gen, dtype=I32)  # block 0 is the scratch block
    return last, make_drafts(last, seq_lens, gen, 0.7), seq_lens, table


def assert_same(result, expected):
    for n in FIELDS:
        assert torch.equal(getattr(result, n), expected[n]), n
