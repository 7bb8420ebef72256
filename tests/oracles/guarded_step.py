"""A guarded verify step on the CPU for the device guard's tests: the engine_kernels fixture's layout, a stand-in
target, valid inputs and the step on the torch semantics."""

from __future__ import annotations

import torch

from specgen.runtime.capabilities import SpeculativeVerifyCapabilities
from specgen.runtime.step_plan import eager_step
from specgen.runtime.step_records import RESULT_FIELDS as FIELDS  # the step's results

W, BT, BS = 4, 8, 16  # a layout of the engine_kernels fixture (tests/conftest.py)
VOCAB = 50
I32 = torch.int32
CAPS = SpeculativeVerifyCapabilities(supports_in_graph_input_update=True, block_size=BS, block_table_width=BT)


def model_forward(bufs):
    """A stand-in target: a function of each row's token and position."""
    return ((bufs["tokens"].long() * 7 + bufs["positions"].long()) % VOCAB).to(I32).view(-1, W)


def fill(bufs, batch, gen, max_len=60):
    """Valid inputs (inside every guard, blocks 1..63 allocated) in rows ``:batch``; returns them."""
    vals = {
        "last_tokens": torch.randint(0, VOCAB, (batch,), generator=gen, dtype=I32),
        "draft_tokens": torch.randint(0, VOCAB, (batch, W - 1), generator=gen, dtype=I32),
        "seq_lens": torch.randint(0, max_len + 1, (batch,), generator=gen, dtype=I32),
        "block_table": torch.randint(1, 64, (batch, BT), generator=gen, dtype=I32),
    }
    for n, t in vals.items():
        bufs[n][:batch].copy_(t.to(bufs[n].device))
    return vals


def expected(bufs, batch):
    """The step on the torch semantics over what rows ``:batch`` of the buffers hold."""
    out = eager_step(
        model_forward,
        W,
        BS,
        8,
        *(bufs[n][:batch].cpu() for n in ("last_tokens", "draft_tokens", "seq_lens", "block_table")),
    )
    return {n: out[n] for n in FIELDS}
