"""Bucketed step buffers: buckets, allocation, padding rows and input loading."""

from __future__ import annotations

import torch

from specgen.runtime.buffers import SAMPLING_EXTRA, alloc_step_buffers, bucket_of, buckets_for, load_inputs, pad_rows
from specgen.specializations.families import FAMILIES, ArgSpec, Family, register, unregister

I32 = torch.int32


def test_buckets():
    assert buckets_for(1) == (1,) and buckets_for(8) == (1, 2, 4, 8) and buckets_for(6) == (1, 2, 4, 6)
    assert [bucket_of((1, 2, 4, 6), b) for b in (1, 2, 3, 5, 6)] == [1, 2, 4, 6, 6]


def test_alloc_covers_every_family_argument():
    bufs = alloc_step_buffers(4, 3, 8, block_size=16, scratch_block=2, num_splits=5, fill_padding=True)
    # the vocabulary families' tensors (a shape naming V) are the engine's sampling state, not step buffers
    steps = {a.name for f in FAMILIES.values() if not f.uses_vocab for a in f.args}
    assert steps | set(SAMPLING_EXTRA) == set(bufs)
    floats = {"draft_probs", "target_draft_probs", "accept_uniforms", "temperature", "top_p"}  # sampling's
    dtype = {"seed": torch.int64}
    assert all(t.dtype == dtype.get(n, torch.float32 if n in floats else I32) for n, t in bufs.items())
    assert bufs["temperature"].shape == (4,) and not bufs["temperature"].any()  # every row starts greedy
    assert bufs["top_p"].eq(1).all() and not bufs["top_k"].any() and bufs["draft_probs"].eq(1).all()
    assert bufs["tokens"].shape == (12,) and bufs["block_table"].shape == (4, 8)
    assert bufs["scratch_slot"].tolist() == [32] and (bufs["block_table"] == 2).all()
    assert (alloc_step_buffers(2, 3, 8, block_size=16)["block_table"] == 0).all()


def test_a_vocabulary_family_gets_no_step_buffers():
    args = (ArgSpec("toy_logits", "float32", "(B, V)"), ArgSpec("toy_token", "int32", "(B,)", output=True))
    register(Family("toy_vocab_pass", ("W",), args, threads_per="block", rows="B"))
    try:
        bufs = alloc_step_buffers(2, 3, 8, block_size=16)
    finally:
        unregister("toy_vocab_pass")
    assert "toy_logits" not in bufs and "toy_token" not in bufs and "tokens" in bufs


def test_load_inputs_pads_the_rows_after_the_batch():
    bufs = alloc_step_buffers(4, 3, 2, block_size=16, scratch_block=1)
    for name in ("last_tokens", "draft_tokens", "seq_lens", "block_table"):
        bufs[name].fill_(9)
    load_inputs(
        bufs,
        2,
        torch.tensor([1, 2], dtype=I32),
        torch.ones(2, 2, dtype=I32),
        torch.tensor([5, 6], dtype=I32),
        torch.full((2, 2), 3, dtype=I32),
        scratch_block=1,
    )
    assert bufs["last_tokens"].tolist() == [1, 2, 0, 0] and bufs["seq_lens"].tolist() == [5, 6, 0, 0]
    assert bufs["block_table"].tolist() == [[3, 3], [3, 3], [1, 1], [1, 1]]
    assert bufs["draft_tokens"][2:].eq(0).all()
    pad_rows(bufs, 1, scratch_block=7)
    assert bufs["block_table"].tolist() == [[3, 3], [7, 7], [7, 7], [7, 7]]
    assert bufs["seq_lens"].tolist() == [5, 0, 0, 0]
