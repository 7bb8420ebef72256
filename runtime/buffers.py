"""The persistent step buffers of a verify graph: one set per batch bucket, allocated once.

Every family argument of the plan gets a stable-address tensor of its dtype (int32, and float32 for
sampled verification's probabilities, uniforms and temperatures), except the arguments of families
over the vocabulary (a shape naming ``V`` or ``C``: the engine's sampling state holds those); padding
rows of a bucket point at the scratch block so their writes land nowhere that
matters.
"""

from __future__ import annotations

import torch

from ..specializations.families import DEFAULT_NUM_SPLITS, FAMILIES, shape_of

I32 = torch.int32
INPUTS = ("last_tokens", "draft_tokens", "seq_lens", "block_table", "scratch_slot", "state_slots")  # what a step reads
LINEAR_INPUTS = ("accepted", "state_slots")  # what a hybrid target's step reads besides: the linear state's slots
# a sampling step's per-row inputs besides the families' (``temperature`` is one of spec_rejection_verify's):
# the request's top-k, top-p and seed, read by the vocabulary pass (``runtime/sampling.py``, ``sample_rows``)
SAMPLING_EXTRA = {"top_k": torch.int32, "top_p": torch.float32, "seed": torch.int64}
SAMPLING_INPUTS = ("temperature", *SAMPLING_EXTRA, "draft_probs")  # what a sampling step reads per row
# the device guard's own bounds, per-sequence bits and flag argument (``spec_verify_guard_check``; the guard
# passes its own flag, shared by every bucket): written by the guard (``runtime/device_guard.py``), never a
# step's result, so an eager step's outputs never overwrite them
GUARD_STATE = ("guard_params", "guard_bits", "guard_flag")


def buckets_for(max_batch: int) -> tuple[int, ...]:
    """Batch buckets 1, 2, 4, ... below ``max_batch``, then ``max_batch``."""
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        b *= 2
    out.append(max_batch)
    return tuple(out)


def bucket_of(buckets: tuple[int, ...], batch: int) -> int:
    """The smallest bucket that holds ``batch`` rows (``batch`` must fit the largest)."""
    return next(b for b in buckets if b >= batch)


def alloc_step_buffers(
    batch: int,
    width: int,
    block_table_width: int,
    *,
    block_size: int,
    scratch_block: int = 0,
    num_splits: int = DEFAULT_NUM_SPLITS,
    device=None,
    fill_padding: bool = False,
) -> dict[str, torch.Tensor]:
    """Every buffer of one verify step for ``batch`` rows: the families' arguments in their dtypes, zeroed
    (a zero ``temperature`` is a greedy row), and a sampling step's ``top_k``, ``top_p`` and ``seed``
    (``SAMPLING_EXTRA``); ``top_p`` and ``draft_probs`` start at 1 (greedy rows, one-hot drafts).

    ``scratch_slot`` holds the scratch block's first slot; with ``fill_padding``
    every block-table entry starts as the scratch block.  ``state_slots`` (a
    hybrid target's linear-state slots) starts as -1: no slot, so no write.
    """
    names: dict[str, tuple[tuple[int, ...], torch.dtype]] = {}
    for fam in FAMILIES.values():
        if fam.uses_vocab or fam.uses_chunks:  # shapes over V or C: the engine's sampling state holds those
            continue
        for a in fam.args:
            dtype = getattr(torch, a.dtype) if a.dtype != "draft" else I32
            names.setdefault(a.name, (shape_of(a, batch, width, block_table_width, num_splits), dtype))
    bufs = {n: torch.zeros(s, dtype=d, device=device) for n, (s, d) in names.items()}
    bufs |= {n: torch.zeros(batch, dtype=d, device=device) for n, d in SAMPLING_EXTRA.items()}
    bufs["top_p"].fill_(1.0)  # every row greedy: temperature 0, top-k 0 and top-p 1 keep every token
    bufs["draft_probs"].fill_(1.0)  # a greedy draft's q(x): the one-hot case
    bufs["scratch_slot"].fill_(scratch_block * block_size)
    bufs["state_slots"].fill_(-1)
    if fill_padding:
        bufs["block_table"].fill_(scratch_block)
    return bufs


def pad_rows(bufs: dict[str, torch.Tensor], batch: int, scratch_block: int) -> None:
    """Rows ``batch:`` become padding: no tokens, length 0, every block the scratch block, no linear state."""
    bufs["last_tokens"][batch:].fill_(0)
    bufs["accepted"][batch:].fill_(0)
    bufs["state_slots"][batch:].fill_(-1)
    bufs["draft_tokens"][batch:].fill_(0)
    bufs["temperature"][batch:].fill_(0)  # a padding row verifies greedily
    bufs["seq_lens"][batch:].fill_(0)
    bufs["block_table"][batch:].fill_(scratch_block)


def load_inputs(
    bufs: dict[str, torch.Tensor],
    batch: int,
    last_tokens: torch.Tensor,
    draft_tokens: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    *,
    scratch_block: int,
    non_blocking: bool = False,
    linear: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> None:
    """Copy a step's inputs into rows ``:batch`` of a bucket's buffers and pad the rows after them.

    ``linear``: a hybrid target's ``(accepted, state_slots)``."""
    bufs["last_tokens"][:batch].copy_(last_tokens, non_blocking=non_blocking)
    if linear is not None:
        for name, t in zip(LINEAR_INPUTS, linear):
            bufs[name][:batch].copy_(t, non_blocking=non_blocking)
    bufs["draft_tokens"][:batch].copy_(draft_tokens, non_blocking=non_blocking)
    bufs["seq_lens"][:batch].copy_(seq_lens, non_blocking=non_blocking)
    bufs["block_table"][:batch].copy_(block_table, non_blocking=non_blocking)
    if batch < bufs["seq_lens"].shape[0]:
        pad_rows(bufs, batch, scratch_block)


def linear_inputs(has_linear_state: bool, batch: int, width: int, accepted, state_slots):
    """``(accepted, state_slots)`` of a hybrid target's step, checked; None for a target without linear state."""
    if not has_linear_state:
        if accepted is not None or state_slots is not None:
            raise ValueError("step: accepted and state_slots are for a target with linear state")
        return None
    if accepted is None or state_slots is None:
        raise ValueError(
            "step: a target with linear state (caps.has_linear_state) needs accepted[B] (the previous "
            "step's counts) and state_slots[B, W]"
        )
    if tuple(accepted.shape) != (batch,) or tuple(state_slots.shape) != (batch, width):
        raise ValueError(
            f"step: expected accepted[{batch}] and state_slots[{batch}, {width}]; got "
            f"{tuple(accepted.shape)}, {tuple(state_slots.shape)}"
        )
    return accepted, state_slots


def check_step_inputs(width: int, last_tokens, draft_tokens, seq_lens, block_table) -> None:
    """``ValueError`` unless the shapes are ``last_tokens[B]``, ``draft_tokens[B, W - 1]``, ``seq_lens[B]``,
    ``block_table[B, BT]``."""
    batch = int(seq_lens.shape[0])
    if (
        draft_tokens.shape != (batch, width - 1)
        or last_tokens.shape != (batch,)
        or block_table.dim() != 2
        or block_table.shape[0] != batch
    ):
        raise ValueError(
            f"step: expected last_tokens[B], draft_tokens[B, {width - 1}], seq_lens[B], "
            f"block_table[B, BT]; got {tuple(last_tokens.shape)}, {tuple(draft_tokens.shape)}, "
            f"{tuple(seq_lens.shape)}, {tuple(block_table.shape)}"
        )
