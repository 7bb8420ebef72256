"""The hybrid target's fast forward (``qwen3_5_fast``) against its torch forward: a padded prefill, then a
verification of W rows reading the committed slots (with a tapped layer), then the MTP head's two-row and
chained steps (attending from position 1), in one process (``python hybrid_fast_cases.py DEVICE DTYPE``;
the CPU run sets ``TRITON_INTERPRET=1`` first).  Prints one JSON object: the largest errors of the logits, the
KV cache and the state pool after each forward, the scale of the logits, and whether the argmax tokens agree.
"""

from __future__ import annotations

import copy
import json
import sys

import torch

from specgen.models.qwen3_5 import Qwen35Model
from specgen.models.qwen3_5_mtp import Qwen35MTPHead

I32 = torch.int32
BS, BT = 16, 4


def run(model, tokens, positions, slots, table, kv_lens, qsl, rows, read, write, taps=()):
    out = model(tokens, positions, slots, table, kv_lens, qsl, rows, taps, state_read=read, state_write=write)
    return out[1] if not taps else torch.cat([out[1], out[2]], dim=-1)


def head_steps(model, dev):
    """The MTP head over two sequences: a two-row step (positions 1, 2 and 6, 7), then a chained one-row step;
    the first sequence's keys include position 0, which the head never attends."""
    head = Qwen35MTPHead.create(model, seed=3)
    head.allocate_kv_cache(2 * BT + 1, BS)
    table = torch.tensor([[3, 1, 7, -1], [2, 8, 5, 4]], dtype=I32, device=dev)
    gen = torch.Generator().manual_seed(11)
    hidden = torch.randn(4, model.config.hidden_size, generator=gen).to(dev, model.embed_tokens.weight.dtype)
    tokens = torch.randint(0, model.config.vocab_size, (4,), generator=gen).to(dev)
    pos = torch.tensor([1, 2, 6, 7], device=dev)
    seq = torch.tensor([0, 0, 1, 1], device=dev)
    slots = (table.long()[seq, pos // BS] * BS + pos % BS).to(I32)
    qsl = torch.tensor([0, 2, 4], device=dev)
    h, logits = head(tokens, pos, slots, head.from_target(hidden), table, torch.tensor([3, 8], device=dev), qsl, 2)
    out = [torch.cat([logits, h], dim=-1)]
    pos = torch.tensor([3, 8], device=dev)
    slots = (table.long()[torch.arange(2, device=dev), pos // BS] * BS + pos % BS).to(I32)
    h1, logits1 = head(
        logits.view(2, 2, -1)[:, 1].argmax(-1),
        pos,
        slots,
        h.view(2, 2, -1)[:, 1],
        table,
        pos + 1,
        torch.arange(3, device=dev),
        1,
    )
    out.append(torch.cat([logits1, h1], dim=-1))
    return out


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
    out.append(run(model, tokens, pos, slots, table, kv, qsl, 3, read, write, taps=(1, 2)))
    return out + head_steps(model, dev)


def main(device: str, dtype: torch.dtype) -> dict:
    ref = Qwen35Model.create("qwen3.5-tiny", seed=0, dtype=dtype, device=device)
    fast = copy.deepcopy(ref)
    ref.hybrid_kernels, fast.hybrid_kernels = "torch", "triton"
    want, got = forwards(ref, device), forwards(fast, device)
    res, vocab = {}, ref.config.vocab_size
    for name, w, g in zip(("prefill", "verify", "head", "head_chained"), want, got):
        res[name] = {
            "err_logits": (g.float() - w.float()).abs().max().item(),
            "scale": w.float().abs().max().item(),
            "same_tokens": bool(torch.equal(g[:, :vocab].argmax(-1), w[:, :vocab].argmax(-1))),
        }
    res["err_kv"] = max((a - b).abs().max().item() for a, b in zip(fast.kv_cache.k, ref.kv_cache.k))
    res["err_state"] = (fast.linear_state._state[:, :6] - ref.linear_state._state[:, :6]).abs().max().item()
    res["err_conv"] = (
        (fast.linear_state._conv[:, :6].float() - ref.linear_state._conv[:, :6].float()).abs().max().item()
    )
    return res


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], getattr(torch, sys.argv[2]))))
