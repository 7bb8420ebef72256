"""Paged KV cache, block allocation and fixed-shape paged attention.

Every function here keeps shapes independent of the data (no ``.item()``, no
``nonzero``, no boolean indexing), so a forward built on them can be captured
in a CUDA graph over persistent metadata buffers.  Slot arithmetic follows
``docs/kernels.md``: ``slot(b, p) = block_table[b, p // BS] * BS + p % BS`` for
``0 <= p < BT * BS`` with a non-negative entry and a slot that fits int32, else
``-1`` (no write).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from ..runtime.semantics import slot


class BlockAllocator:
    """A free list of cache blocks.

    The list is shuffled by ``seed`` so that block tables built from it are
    non-contiguous, which is what paged attention has to get right.
    """

    def __init__(self, num_blocks: int, seed: int | None = 0):
        self._free = list(range(num_blocks))
        if seed is not None:
            random.Random(seed).shuffle(self._free)

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self, n: int) -> list[int]:
        if n > len(self._free):
            raise RuntimeError(f"out of KV blocks: want {n}, {len(self._free)} free")
        blocks, self._free = self._free[:n], self._free[n:]
        return blocks

    def free(self, blocks: list[int]) -> None:
        self._free.extend(blocks)


def make_block_table(
    allocator: BlockAllocator, num_seqs: int, blocks_per_seq: int, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """``[num_seqs, blocks_per_seq]`` int32 table, every entry allocated."""
    rows = [allocator.allocate(blocks_per_seq) for _ in range(num_seqs)]
    return torch.tensor(rows, dtype=torch.int32, device=device).reshape(num_seqs, blocks_per_seq)


def verify_metadata(
    seq_lens: torch.Tensor, block_table: torch.Tensor, width: int, block_size: int
) -> tuple[torch.Tensor, ...]:
    """``spec_verify_metadata_update`` as int32 tensors.

    Returns ``(positions[B*W], slot_mapping[B*W], kv_lens[B], query_start_loc[B+1])``.
    """
    b = seq_lens.shape[0]
    pos = seq_lens.long()[:, None] + torch.arange(width, device=seq_lens.device)
    slots = slot(block_table, pos, block_size)
    qsl = torch.arange(b + 1, device=seq_lens.device) * width
    kv_lens = seq_lens.long() + width
    return pos.reshape(-1).int(), slots.reshape(-1).int(), kv_lens.int(), qsl.int()


class PagedKVCache:
    """Per-layer K and V caches of shape ``[num_blocks, block_size, kv_heads, head_dim]``.

    The storage holds one extra slot past the last block; writes whose slot is
    -1 land there, which keeps a masked write a fixed-shape ``index_copy_``.
    """

    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ):
        self.num_blocks, self.block_size = num_blocks, block_size
        self.num_slots = num_blocks * block_size
        shape = (num_layers, self.num_slots + 1, kv_heads, head_dim)
        self._k = torch.zeros(shape, dtype=dtype, device=device)
        self._v = torch.zeros(shape, dtype=dtype, device=device)
        view = (num_blocks, block_size, kv_heads, head_dim)
        self.k = [self._k[i, : self.num_slots].view(view) for i in range(num_layers)]
        self.v = [self._v[i, : self.num_slots].view(view) for i in range(num_layers)]

    def layer_storage(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer ``layer``'s K and V as ``[num_slots + 1, kv_heads, head_dim]`` (the last slot: -1 writes)."""
        return self._k[layer], self._v[layer]

    def write(self, layer: int, slot_mapping: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store rows ``k[n], v[n]`` (``[N, kv_heads, head_dim]``) at ``slot_mapping[n]``."""
        slots = slot_mapping.long()
        idx = torch.where(slots >= 0, slots, torch.full_like(slots, self.num_slots))
        self._k[layer].index_copy_(0, idx, k.to(self._k.dtype))
        self._v[layer].index_copy_(0, idx, v.to(self._v.dtype))

    def gather(self, layer: int, block_table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each sequence's K, V up to the table capacity: ``[B, BT * BS, kv_heads, head_dim]``."""
        bt = block_table.long().clamp(min=0)
        offs = torch.arange(self.block_size, device=bt.device)
        slots = (bt[:, :, None] * self.block_size + offs).reshape(bt.shape[0], -1)
        return self._k[layer][slots], self._v[layer][slots]


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_pos: torch.Tensor,
    kv_lens: torch.Tensor,
    scale: float,
    kv_start: int = 0,
) -> torch.Tensor:
    """Causal GQA over gathered context.

    ``q [B, R, H, D]`` attends to keys ``k, v [B, L, KVH, D]`` at positions
    ``kv_start <= p <= q_pos[b, r]`` and ``p < kv_lens[b]``.  Query head ``h``
    reads KV head ``h // (H // KVH)``; scores are masked and soft-maxed in float32.
    """
    b, r, h, d = q.shape
    kvh = k.shape[2]
    qg = q.view(b, r, kvh, h // kvh, d)
    scores = torch.einsum("brkgd,blkd->bkgrl", qg, k).float() * scale
    kpos = torch.arange(k.shape[1], device=q.device)
    visible = (kpos <= q_pos[:, :, None]) & (kpos < kv_lens.long()[:, None, None])
    if kv_start:  # a cache whose first positions are never written (an MTP head's position 0)
        visible = visible & (kpos >= kv_start)
    scores = scores.masked_fill(~visible[:, None, None], torch.finfo(torch.float32).min)
    probs = torch.softmax(scores, dim=-1).to(v.dtype)
    return torch.einsum("bkgrl,blkd->brkgd", probs, v).reshape(b, r, h, d)


@dataclass(slots=True)
class AttentionBatch:
    """Per-forward attention metadata, shared by every layer.

    Sequence b owns rows ``query_start_loc[b] + i`` for ``i < rows_per_seq``.
    """

    row_index: torch.Tensor  # [B, R] int64 rows of the flat token axis
    q_pos: torch.Tensor  # [B, R] int64 position of each row
    slots: torch.Tensor  # [N] int64 write slot of each row
    block_table: torch.Tensor  # [B, BT]
    kv_lens: torch.Tensor  # [B]
    cos: torch.Tensor  # [N, head_dim] rotary tables, float32
    sin: torch.Tensor
    kv_start: int = 0  # keys at positions below it are not attended (``paged_attention``)

    @classmethod
    def build(
        cls,
        positions,
        slot_mapping,
        block_table,
        kv_lens,
        query_start_loc,
        rows_per_seq: int,
        head_dim: int,
        rope_theta: float,
    ) -> "AttentionBatch":
        dev = positions.device
        pos = positions.long()
        rows = query_start_loc.long()[:-1, None] + torch.arange(rows_per_seq, device=dev)
        half = torch.arange(0, head_dim, 2, device=dev, dtype=torch.float32) / head_dim
        inv_freq = 1.0 / (rope_theta**half)
        freqs = pos.float()[:, None] * inv_freq
        emb = torch.cat([freqs, freqs], dim=-1)
        return cls(rows, pos[rows], slot_mapping.long(), block_table, kv_lens, emb.cos(), emb.sin())

    def attend(
        self, cache: PagedKVCache, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        """Write this forward's K/V, then attend: ``q [N, H, D] -> [N, H, D]``."""
        cache.write(layer, self.slots, k, v)
        kc, vc = cache.gather(layer, self.block_table)
        out = paged_attention(q[self.row_index], kc, vc, self.q_pos, self.kv_lens, q.shape[-1] ** -0.5, self.kv_start)
        flat = torch.zeros_like(q)
        return flat.index_copy_(0, self.row_index.reshape(-1), out.reshape(-1, *q.shape[1:]))
