"""The hybrid target's fast forward (``qwen3_5_fast``) against its torch forward: a padded prefill, then a
verification of W rows reading the committed slots, in one process (``python hybrid_fast_cases.py DEVICE DTYPE``;
the CPU run sets ``TRITON_INTERPRET=1`` first).  Prints one JSON object: the largest errors of the logits, the
KV cache and the state pool after each forward, the scale of the logits, and whether the argmax tokens agree.
"""

from __future__ import annotations

import copy
import json
import sys

import torch

from specgen.models.qwen3_5 import Qwen35Model

I32 = torch.int32
BS, BT = 16, 4


def run(model, tokens, positions, slots, table, kv_lens, qsl, rows, read, write):
    _, logits = model(tokens, positions, slots, table, kv_lens, qsl, rows, state_read=read, state_write=write)
    return logits


def forwards(model, dev):
    """A prefill of two prompts (5 and 3 tokens, padded to 5 rows), then a verification of W = 3 rows each."""
    model.allocate_kv_cache(2 * BT + 1, BS, block_table_width=BT)
    model.allocate_linear_state(6)
    table = torch.tensor([[3, 1, 7, -1], [2, 8, 5, 4]], dtype=I32, device=dev)
    gen = torch.Generator().manual_seed(7)
    out = []
    # prefill: sequence 0 has 5 tokens, sequence 1 has 3 (rows 3, 4 padding: no slot, no state)
    lens = [5, 3]
    pos = torch.tensor([0, 1, 2, 3, 4, 0, 1, 2, 3, 4], device=dev)
    slots = (table.long()[torch.arange(2, device=dev).repeat_interleave(5), pos // BS] * BS + pos % BS).to(I32)
    slots[8:] = -1
    write = torch.full((10,), -1, dtype=I32, device=dev)
    write[4], write[7] = 0, 3  # each prompt's last row: the sequence's slot 0 (slots 0..2 and 3..5)
    tokens = torch.randint(0, model.config.vocab_size, (10,), generator=gen).to(dev)
    qsl = torch.tensor([0, 5, 10], device=dev)
    kv = torch.tensor(lens, device=dev)
    read = torch.full((2,), -1, dtype=I32, device=dev)
    out.append(run(model, tokens, pos, slots, table, kv, qsl, 5, read, write))
    # verify W = 3 from the committed slots 0 and 3, row j's state to slot j of the sequence
    pos = torch.tensor([5, 6, 7, 3, 4, 5], device=dev)
    seq = torch.arange(2, device=dev).repeat_interleave(3)
    slots = (table.long()[seq, pos // BS] * BS + pos % BS).to(I32)
    write = torch.tensor([0, 1, 2, 3, 4, 5], dtype=I32, device=dev)
    read = torch.tensor([0, 3], dtype=I32, device=dev)
    tokens = torch.randint(0, model.config.vocab_size, (6,), generator=gen).to(dev)
    qsl = torch.tensor([0, 3, 6], device=dev)
    kv = torch.tensor([8, 6], device=dev)
    out.append(run(model, tokens, pos, slots, table, kv, qsl, 3, read, write))
    return out


def main(device: str, dtype: torch.dtype) -> dict:
    ref = Qwen35Model.create("qwen3.5-tiny", seed=0, dtype=dtype, device=device)
    fast = copy.deepcopy(ref)
    ref.hybrid_kernels, fast.hybrid_kernels = "torch", "triton"
    want, got = forwards(ref, device), forwards(fast, device)
    res = {}
    for name, w, g in zip(("prefill", "verify"), want, got):
        res[name] = {
            "err_logits": (g.float() - w.float()).abs().max().item(),
            "scale": w.float().abs().max().item(),
            "same_tokens": bool(torch.equal(g.argmax(-1), w.argmax(-1))),
        }
    res["err_kv"] = max((a - b).abs().max().item() for a, b in zip(fast.kv_cache.k, ref.kv_cache.k))
    res["err_state"] = (fast.linear_state._state[:, :6] - ref.linear_state._state[:, :6]).abs().max().item()
    res["err_conv"] = (
        (fast.linear_state._conv[:, :6].float() - ref.linear_state._conv[:, :6].float()).abs().max().item()
    )
    return res


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], getattr(torch, sys.argv[2]))))
