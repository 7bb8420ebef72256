"""The kernel families' torch semantics: the ground truth of ``docs/kernels.md``.

Each function transcribes one section of the contract with vectorised torch ops
(no loop over the batch), takes the family's arguments in ``FAMILIES`` order
and writes its outputs in place, exactly like a generated kernel:

    >>> tokens = torch.full((4,), -777, dtype=torch.int32)
    >>> spec_verify_token_update(torch.tensor([7, 9], dtype=torch.int32),
    ...                          torch.tensor([[1], [2]]), tokens)
    >>> tokens.tolist()
    [7, 1, 9, 2]

Block-table families take ``block_size`` as a keyword; the block-table width
is ``block_table.shape[1]``.  Works on CPU and CUDA tensors alike.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..specializations.families import DEFAULT_NUM_SPLITS, FAMILIES

I32 = torch.int32


def slot(block_table: torch.Tensor, positions: torch.Tensor, block_size: int) -> torch.Tensor:
    """``slot(b, p)`` of the contract for every position of row b: int32, the shape of ``positions``.

    ``positions`` is ``(B,)`` or ``(B, ...)``; a position outside
    ``[0, BT * BS)`` or whose block-table entry is negative (unallocated)
    gives -1, the no-write slot.
    """
    bt = block_table.long()
    p = positions.long().reshape(bt.shape[0], -1)
    limit = bt.shape[1] * block_size
    valid = (p >= 0) & (p < limit)
    safe = torch.where(valid, p, torch.zeros_like(p))
    entry = torch.gather(bt, 1, torch.div(safe, block_size, rounding_mode="floor"))
    valid &= entry >= 0
    out = torch.where(valid, entry * block_size + safe % block_size, torch.full_like(p, -1))
    return out.to(I32).reshape(positions.shape)


def _rows(seq_lens: torch.Tensor, width: int) -> torch.Tensor:
    """``(B, W)`` positions ``S[b] + j`` of the verification layout, int64."""
    return seq_lens.long()[:, None] + torch.arange(width, device=seq_lens.device)


def spec_verify_token_update(last_tokens, draft_tokens, tokens) -> None:
    width = draft_tokens.shape[1] + 1
    view = tokens.view(-1, width)
    view[:, 0] = last_tokens
    view[:, 1:] = draft_tokens.to(tokens.dtype)


def spec_verify_metadata_update(seq_lens, block_table, positions, slot_mapping, kv_lens,
                                query_start_loc, *, block_size: int) -> None:
    batch = seq_lens.shape[0]
    width = positions.shape[0] // batch
    pos = _rows(seq_lens, width)
    positions.copy_(pos.reshape(-1))
    slot_mapping.copy_(slot(block_table, pos, block_size).reshape(-1))
    kv_lens.copy_(seq_lens.long() + width)
    query_start_loc.copy_(torch.arange(batch + 1, device=seq_lens.device) * width)


def spec_verify_attention_tiling_update(seq_lens, row_kv_lens, row_num_blocks, row_last_block_len,
                                        row_block_offsets, max_kv_len, kv_split_len, *,
                                        block_size: int, num_splits: int = DEFAULT_NUM_SPLITS) -> None:
    width = row_kv_lens.shape[0] // seq_lens.shape[0]
    kv = (_rows(seq_lens, width) + 1).reshape(-1)
    blocks = torch.div(kv + block_size - 1, block_size, rounding_mode="floor")
    row_kv_lens.copy_(kv)
    row_num_blocks.copy_(blocks)
    row_last_block_len.copy_(kv - (blocks - 1) * block_size)
    row_block_offsets[:1].zero_()
    row_block_offsets[1:].copy_(torch.cumsum(blocks, 0))
    longest = kv.max()
    max_kv_len.copy_(longest.reshape(1))
    max_blocks = torch.div(longest + block_size - 1, block_size, rounding_mode="floor")
    split = torch.div(max_blocks + num_splits - 1, num_splits, rounding_mode="floor") * block_size
    kv_split_len.copy_(split.reshape(1))


def _accepted(draft_tokens, target_tokens) -> torch.Tensor:
    """Length of the longest prefix where draft == target, int64 ``(B,)``."""
    match = (draft_tokens.long() == target_tokens[:, :-1].long()).long()
    return torch.cumprod(match, dim=1).sum(dim=1)


def greedy_prefix_verify(draft_tokens, target_tokens, accepted, next_tokens) -> None:
    acc = _accepted(draft_tokens, target_tokens)
    accepted.copy_(acc)
    width = target_tokens.shape[1]
    keep = torch.arange(width, device=acc.device)[None, :] <= acc[:, None]
    next_tokens.copy_(torch.where(keep, target_tokens, torch.full_like(target_tokens, -1)))


def prepare_next_draft(accepted, target_tokens, seq_lens, block_table, scratch_slot,
                       next_last_token, next_seq_lens, draft_positions, draft_slots, hidden_rows,
                       *, block_size: int) -> None:
    batch, width = target_tokens.shape
    acc = accepted.long()
    new_len = seq_lens.long() + acc + 1  # S': tokens with valid target KV
    base = torch.arange(batch, device=acc.device) * width
    next_last_token.copy_(torch.gather(target_tokens, 1, acc[:, None])[:, 0])
    next_seq_lens.copy_(new_len)
    draft_positions.copy_(torch.stack([new_len - 1, new_len], dim=1))
    hidden_rows.copy_(torch.stack([base + (acc - 1).clamp(min=0), base + acc], dim=1))
    repair = torch.where(acc == width - 1, slot(block_table, new_len - 1, block_size),
                         scratch_slot.to(I32).expand(batch))
    draft_slots.copy_(torch.stack([repair, slot(block_table, new_len, block_size)], dim=1))


def context_kv_update(accepted, seq_lens, block_table, context_slots, *, block_size: int) -> None:
    batch = seq_lens.shape[0]
    width = context_slots.shape[0] // batch
    slots = slot(block_table, _rows(seq_lens, width), block_size)
    keep = torch.arange(width, device=slots.device)[None, :] <= accepted.long()[:, None]
    context_slots.copy_(torch.where(keep, slots, torch.full_like(slots, -1)).reshape(-1))


def spec_verify_head_update(last_tokens, draft_tokens, seq_lens, block_table, tokens, positions, slot_mapping,
                            kv_lens, query_start_loc, row_kv_lens, row_num_blocks, row_last_block_len,
                            row_block_offsets, max_kv_len, kv_split_len, *, block_size: int,
                            num_splits: int = DEFAULT_NUM_SPLITS) -> None:
    """The composite: token update, metadata update, attention tiling update."""
    spec_verify_token_update(last_tokens, draft_tokens, tokens)
    spec_verify_metadata_update(seq_lens, block_table, positions, slot_mapping, kv_lens, query_start_loc,
                                block_size=block_size)
    spec_verify_attention_tiling_update(seq_lens, row_kv_lens, row_num_blocks, row_last_block_len, row_block_offsets,
                                        max_kv_len, kv_split_len, block_size=block_size, num_splits=num_splits)


def reference_kwargs(family: str, block_size: int, num_splits: int = DEFAULT_NUM_SPLITS) -> dict:
    """The keywords ``family``'s reference takes besides its tensors."""
    fam = FAMILIES[family]
    kw = {"block_size": block_size} if "BS" in fam.key_params else {}
    if fam.uses_num_splits:
        kw["num_splits"] = num_splits
    return kw


def run_reference(family: str, bufs, *, block_size: int, num_splits: int = DEFAULT_NUM_SPLITS) -> None:
    """``family``'s reference over a dict of step buffers named like its arguments."""
    REFERENCES[family](*(bufs[a.name] for a in FAMILIES[family].args),
                       **reference_kwargs(family, block_size, num_splits))


def register_semantics(fn: Callable[..., None], name: str | None = None) -> Callable[..., None]:
    """Make ``fn`` the semantics of the family ``name`` (default: ``fn.__name__``); usable as a decorator."""
    name = name or fn.__name__
    if name not in FAMILIES:
        raise LookupError(f"no kernel family {name!r}: register its Family in specgen.specializations first")
    REFERENCES[name] = fn
    return fn


REFERENCES: dict[str, Callable[..., None]] = {
    f.__name__: f
    for f in (spec_verify_token_update, spec_verify_metadata_update,
              spec_verify_attention_tiling_update, greedy_prefix_verify,
              prepare_next_draft, context_kv_update, spec_verify_head_update)
}
