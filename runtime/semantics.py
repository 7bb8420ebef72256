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

Every function is total over its int32 inputs (``docs/kernels.md``, "Outside
the guarded domain"): sequence lengths saturate at ``2**31 - 1 - W``,
accepted counts are clamped into ``0..W-1``, positions and lengths are
clamped at 0, and a slot is either computed from a non-negative entry or -1.
Arithmetic runs in int64, so nothing wraps before the int32 store.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..specializations import guard_check as gc
from ..specializations.families import DEFAULT_NUM_SPLITS, FAMILIES, TAIL_COMPOSITES
from .vocab_semantics import (
    spec_draft_sample,
    spec_target_sample,
    spec_target_sample_dense,
    spec_target_sample_dense_tiles,
    spec_target_sample_tiles,
)

I32 = torch.int32
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def slot(block_table: torch.Tensor, positions: torch.Tensor, block_size: int) -> torch.Tensor:
    """``slot(b, p)`` of the contract for every position of row b: int32, the shape of ``positions``.

    ``positions`` is ``(B,)`` or ``(B, ...)``, any integers; a position outside
    ``[0, BT * BS)``, a negative (unallocated) block-table entry, or a slot
    that would not fit int32 gives -1, the no-write slot.
    """
    bt = block_table.long()
    p = positions.long().reshape(bt.shape[0], -1)
    limit = bt.shape[1] * block_size
    valid = (p >= 0) & (p < limit)
    safe = torch.where(valid, p, torch.zeros_like(p))
    entry = torch.gather(bt, 1, torch.div(safe, block_size, rounding_mode="floor"))
    out = entry * block_size + safe % block_size
    valid &= (entry >= 0) & (out <= INT32_MAX)
    return torch.where(valid, out, torch.full_like(p, -1)).to(I32).reshape(positions.shape)


def seq_lens_read(seq_lens: torch.Tensor, width: int) -> torch.Tensor:
    """``S[b]`` as every family reads it, int64: saturated at ``2**31 - 1 - W`` so ``S + W`` fits int32."""
    return seq_lens.long().clamp(max=INT32_MAX - width)


def accepted_read(accepted: torch.Tensor, width: int) -> torch.Tensor:
    """``a[b]`` as every family reads it, int64: clamped into ``0..W-1``."""
    return accepted.long().clamp(0, width - 1)


def _rows(seq_lens: torch.Tensor, width: int) -> torch.Tensor:
    """``(B, W)`` positions ``S[b] + j`` of the verification layout (S saturated), int64."""
    return seq_lens_read(seq_lens, width)[:, None] + torch.arange(width, device=seq_lens.device)


def spec_verify_token_update(last_tokens, draft_tokens, tokens) -> None:
    width = draft_tokens.shape[1] + 1
    view = tokens.view(-1, width)
    view[:, 0] = last_tokens
    wide = draft_tokens.long()  # an int64 token outside int32 is no token: -1
    fits = (wide >= INT32_MIN) & (wide <= INT32_MAX)
    view[:, 1:] = torch.where(fits, wide, torch.full_like(wide, -1))


def spec_verify_metadata_update(
    seq_lens, block_table, positions, slot_mapping, kv_lens, query_start_loc, *, block_size: int
) -> None:
    batch = seq_lens.shape[0]
    width = positions.shape[0] // batch
    pos = _rows(seq_lens, width)
    positions.copy_(pos.clamp(min=0).reshape(-1))
    slot_mapping.copy_(slot(block_table, pos, block_size).reshape(-1))
    kv_lens.copy_((seq_lens_read(seq_lens, width) + width).clamp(min=0))
    query_start_loc.copy_(torch.arange(batch + 1, device=seq_lens.device) * width)


def spec_verify_attention_tiling_update(
    seq_lens,
    row_kv_lens,
    row_num_blocks,
    row_last_block_len,
    row_block_offsets,
    max_kv_len,
    kv_split_len,
    *,
    block_size: int,
    num_splits: int = DEFAULT_NUM_SPLITS,
) -> None:
    width = row_kv_lens.shape[0] // seq_lens.shape[0]
    kv = (_rows(seq_lens, width) + 1).reshape(-1).clamp(min=0)  # an empty row has 0 keys, 0 blocks
    blocks = torch.div(kv + block_size - 1, block_size, rounding_mode="floor")
    row_kv_lens.copy_(kv)
    row_num_blocks.copy_(blocks)
    row_last_block_len.copy_(torch.where(kv > 0, kv - (blocks - 1) * block_size, torch.zeros_like(kv)))
    row_block_offsets[:1].zero_()
    row_block_offsets[1:].copy_(torch.cumsum(blocks, 0).clamp(max=INT32_MAX))
    longest = kv.max()
    max_kv_len.copy_(longest.reshape(1))
    max_blocks = torch.div(longest + block_size - 1, block_size, rounding_mode="floor")
    split = torch.div(max_blocks + num_splits - 1, num_splits, rounding_mode="floor") * block_size
    kv_split_len.copy_(split.clamp(max=INT32_MAX).reshape(1))  # one split longer than any row: saturated


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


def spec_rejection_verify(
    draft_tokens,
    target_tokens,
    draft_probs,
    target_draft_probs,
    accept_uniforms,
    temperature,
    accepted,
    next_tokens,
) -> None:
    """Sampled verification with ``greedy_prefix_verify``'s outputs (``docs/kernels.md``).

    Draft ``i`` is kept iff, on a greedy row (``temperature[b] <= 0``), it equals ``target_tokens[b, i]``,
    and on a sampled row ``accept_uniforms * draft_probs < target_draft_probs`` in float64 (exact for
    float32 operands; a NaN compares false and rejects), in order up to the first rejection.
    ``next_tokens[b]`` is the kept drafts, then ``target_tokens[b, a]`` (the row's own token: its
    residual draw, or the bonus when every draft is kept), then -1.
    """
    width = target_tokens.shape[1]
    greedy = (temperature <= 0)[:, None]
    match = draft_tokens.long() == target_tokens[:, :-1].long()
    ratio = accept_uniforms.double() * draft_probs.double() < target_draft_probs.double()
    acc = torch.cumprod(torch.where(greedy, match, ratio).long(), dim=1).sum(dim=1)
    accepted.copy_(acc)
    j = torch.arange(width, device=acc.device)[None, :]
    drafts = torch.cat([draft_tokens, torch.full_like(draft_tokens[:, :1], -1)], dim=1)
    out = torch.where(j == acc[:, None], target_tokens, torch.full_like(target_tokens, -1))
    next_tokens.copy_(torch.where(j < acc[:, None], drafts, out))


def prepare_next_draft(
    accepted,
    target_tokens,
    seq_lens,
    block_table,
    scratch_slot,
    next_last_token,
    next_seq_lens,
    draft_positions,
    draft_slots,
    hidden_rows,
    *,
    block_size: int,
) -> None:
    batch, width = target_tokens.shape
    acc = accepted_read(accepted, width)
    new_len = seq_lens_read(seq_lens, width) + acc + 1  # S': tokens with valid target KV
    base = torch.arange(batch, device=acc.device) * width
    prepare_next_block(accepted, target_tokens, seq_lens, next_last_token, next_seq_lens)  # the anchor
    draft_positions.copy_(torch.stack([new_len - 1, new_len], dim=1).clamp(min=0))
    hidden_rows.copy_(torch.stack([base + (acc - 1).clamp(min=0), base + acc], dim=1))
    repair = torch.where(
        acc == width - 1, slot(block_table, new_len - 1, block_size), scratch_slot.to(I32).expand(batch)
    )
    draft_slots.copy_(torch.stack([repair, slot(block_table, new_len, block_size)], dim=1))


def prepare_next_block(accepted, target_tokens, seq_lens, next_last_token, next_seq_lens) -> None:
    width = target_tokens.shape[1]
    acc = accepted_read(accepted, width)
    next_last_token.copy_(torch.gather(target_tokens, 1, acc[:, None])[:, 0])
    next_seq_lens.copy_((seq_lens_read(seq_lens, width) + acc + 1).clamp(min=0))


def context_kv_update(accepted, seq_lens, block_table, context_slots, *, block_size: int) -> None:
    batch = seq_lens.shape[0]
    width = context_slots.shape[0] // batch
    slots = slot(block_table, _rows(seq_lens, width), block_size)
    keep = torch.arange(width, device=slots.device)[None, :] <= accepted_read(accepted, width)[:, None]
    context_slots.copy_(torch.where(keep, slots, torch.full_like(slots, -1)).reshape(-1))


def spec_verify_linear_state_update(accepted, state_slots, state_read_slot, state_write_slots) -> None:
    width = state_slots.shape[1]
    slots = state_slots.long()
    slots = torch.where(slots >= 0, slots, torch.full_like(slots, -1))  # any negative entry: no slot
    read = torch.gather(slots, 1, accepted_read(accepted, width)[:, None])[:, 0]
    state_read_slot.copy_(read)
    state_write_slots.copy_(slots.reshape(-1))


def spec_batch_row_remap(
    src_rows,
    src_tokens,
    src_accepted,
    src_next_last_token,
    src_next_seq_lens,
    block_table,
    scratch_slot,
    tokens,
    accepted,
    next_last_token,
    next_seq_lens,
    draft_positions,
    draft_slots,
    hidden_rows,
    hidden_src,
    *,
    block_size: int,
) -> None:
    """Row ``b`` of a step takes the state of source row ``s = src_rows[b]`` (``docs/kernels.md``).

    A source outside ``0..B-1`` is no source: zero tokens, counts and lengths, no-write slots.  The next
    draft's positions, slots and hidden rows are recomputed from the moved ``accepted`` (clamped) and
    ``next_seq_lens`` over the destination's own block-table row, as ``prepare_next_draft`` writes them;
    ``hidden_src[b * W + j]`` is the verify row ``s * W + j`` whose hidden state row ``b * W + j`` takes, or -1.
    """
    batch, width = src_rows.shape[0], tokens.shape[0] // src_rows.shape[0]
    s = src_rows.long()
    has = (s >= 0) & (s < batch)
    sc = torch.where(has, s, torch.zeros_like(s))

    def take(src, fill=0):
        return torch.where(has, src[sc].long(), torch.full_like(s, fill))

    acc = accepted_read(take(src_accepted), width)
    new_len = take(src_next_seq_lens)
    j = torch.arange(width, device=s.device)
    rows = sc[:, None] * width + j
    tokens.copy_(torch.where(has[:, None], src_tokens.long()[rows], torch.zeros_like(rows)).reshape(-1))
    accepted.copy_(acc)
    next_last_token.copy_(take(src_next_last_token))
    next_seq_lens.copy_(new_len.clamp(min=0))
    draft_positions.copy_(torch.stack([new_len - 1, new_len], dim=1).clamp(min=0))
    base = torch.arange(batch, device=s.device) * width
    hidden_rows.copy_(torch.stack([base + (acc - 1).clamp(min=0), base + acc], dim=1))
    repair = torch.where(
        acc == width - 1, slot(block_table, new_len - 1, block_size), scratch_slot.to(I32).expand(batch)
    )
    slots = torch.stack([repair, slot(block_table, new_len, block_size)], dim=1)
    draft_slots.copy_(torch.where(has[:, None], slots, torch.full_like(slots, -1)))  # no source: no write
    hidden_src.copy_(torch.where(has[:, None], rows, torch.full_like(rows, -1)).reshape(-1))


def composite_semantics(name: str) -> Callable[..., None]:
    """The semantics of the composite ``name``: its members' in order over the shared arguments (by name)."""
    fam = FAMILIES[name]

    def run(*tensors, block_size: int, num_splits: int = DEFAULT_NUM_SPLITS) -> None:
        bufs = dict(zip((a.name for a in fam.args), tensors))
        for member in fam.members:
            run_semantics(member, bufs, block_size=block_size, num_splits=num_splits)

    run.__name__ = run.__qualname__ = name
    run.__doc__ = f"The composite {name}: " + ", then ".join(fam.members) + "."
    return run


# spec_verify_head_update: token update, metadata update, attention tiling update; the hybrid target's
# spec_verify_hybrid_head_update adds the linear state's slots
spec_verify_head_update = composite_semantics("spec_verify_head_update")
spec_verify_hybrid_head_update = composite_semantics("spec_verify_hybrid_head_update")


def semantics_kwargs(family: str, block_size: int, num_splits: int = DEFAULT_NUM_SPLITS) -> dict:
    """The keywords ``family``'s reference takes besides its tensors."""
    fam = FAMILIES[family]
    kw = {"block_size": block_size} if "BS" in fam.key_params else {}
    if fam.uses_num_splits:
        kw["num_splits"] = num_splits
    return kw


def run_semantics(family: str, bufs, *, block_size: int, num_splits: int = DEFAULT_NUM_SPLITS) -> None:
    """``family``'s reference over a dict of step buffers named like its arguments."""
    SEMANTICS[family](
        *(bufs[a.name] for a in FAMILIES[family].args), **semantics_kwargs(family, block_size, num_splits)
    )


def register_semantics(fn: Callable[..., None], name: str | None = None) -> Callable[..., None]:
    """Make ``fn`` the semantics of the family ``name`` (default: ``fn.__name__``); usable as a decorator."""
    name = name or fn.__name__
    if name not in FAMILIES:
        raise LookupError(f"no kernel family {name!r}: register its Family in specgen.specializations first")
    SEMANTICS[name] = fn
    return fn


def spec_verify_guard_check(
    seq_lens, block_table, accepted, guard_params, guard_bits, guard_flag, *, block_size: int
) -> None:
    """Sequence ``b``'s failed device-guard conditions as the bits of ``guard_bits[b]``, ORed into
    ``guard_flag[0]`` (``docs/kernels.md``).

    ``guard_params`` holds ``GUARD_SLOTS`` lower then upper length bounds (bit ``e``: ``S`` outside the
    ``e``-th), then the block reach ``R``, the scratch block and the largest accepted count.  Block ``c`` is
    needed when ``R > 0`` and it maps one of ``S .. S + R - 1``; bit ``GUARD_SLOTS``: a needed entry is
    negative or maps a slot past int32; ``GUARD_SLOTS + 1``: ``accepted[b]`` outside ``0 ..`` its largest;
    ``GUARD_SLOTS + 2``: a needed entry is the scratch block while ``S > 0``.
    """
    g = gc.GUARD_SLOTS
    p = guard_params.long()
    s = seq_lens.long()
    bit = lambda k: torch.tensor(1 << k, dtype=torch.long, device=s.device)  # noqa: E731
    out = torch.zeros_like(s)
    for e in range(g):
        out |= torch.where((s < p[e]) | (s > p[g + e]), bit(e), 0)
    acc = accepted.long()
    out |= torch.where((acc < 0) | (acc > p[gc.ACCEPTED_AT]), bit(gc.ACCEPTED_BIT), 0)
    reach = p[gc.REACH_AT]
    d = torch.arange(block_table.shape[1], device=s.device)[None, :] * block_size - s[:, None]
    need = (reach > 0) & (d > -block_size) & (d < reach)
    t = block_table.long()
    out |= torch.where((need & ((t < 0) | (t > (INT32_MAX + 1) // block_size - 1))).any(1), bit(gc.ENTRY_BIT), 0)
    out |= torch.where((need & (t == p[gc.SCRATCH_AT]) & (s[:, None] > 0)).any(1), bit(gc.SCRATCH_BIT), 0)
    guard_bits.copy_(out)
    if out.numel():  # the OR over the sequences: each bit where any sequence has it
        bits = torch.arange(gc.SCRATCH_BIT + 1, device=s.device)
        guard_flag.bitwise_or_((((out[:, None] >> bits) & 1).amax(0) << bits).sum().to(guard_flag.dtype))


SEMANTICS: dict[str, Callable[..., None]] = {
    f.__name__: f
    for f in (
        spec_verify_token_update,
        spec_verify_metadata_update,
        spec_verify_attention_tiling_update,
        greedy_prefix_verify,
        spec_rejection_verify,
        prepare_next_draft,
        context_kv_update,
        prepare_next_block,
        spec_verify_linear_state_update,
        spec_batch_row_remap,
        spec_verify_head_update,
        spec_verify_hybrid_head_update,
        spec_verify_guard_check,
    )
}
# the vocabulary pass's families (runtime/vocab_semantics.py)
SEMANTICS.update(
    {
        f.__name__: f
        for f in (
            spec_target_sample,
            spec_target_sample_dense,
            spec_draft_sample,
            spec_target_sample_tiles,
            spec_target_sample_dense_tiles,
        )
    }
)
# the tails after the forward: verification, then the next draft's inputs or the context slots and the next
# block's anchor (one launch each)
SEMANTICS.update({name: composite_semantics(name) for name in TAIL_COMPOSITES})
