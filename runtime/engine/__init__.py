"""Torch reference runtime: a Qwen3-style target over a paged KV cache, draft
proposers and host-driven greedy / speculative decoding.

The forwards take fixed-shape metadata (no host syncs), so the same code can
be captured in CUDA graphs; the decode loops are the ground truth for the
tokens any optimised runtime must produce.
"""

from .decode import SpecStats, greedy_generate, greedy_prefix, speculative_generate_reference
from .draft import AcceptanceDraft, MTPHead
from .model import PRESETS, ModelConfig, Qwen3Model
from .paged_kv import (AttentionBatch, BlockAllocator, PagedKVCache, make_block_table,
                       paged_attention, slot, verify_metadata)

__all__ = [
    "AcceptanceDraft", "AttentionBatch", "BlockAllocator", "MTPHead", "ModelConfig", "PRESETS",
    "PagedKVCache", "Qwen3Model", "SpecStats", "greedy_generate", "greedy_prefix",
    "make_block_table", "paged_attention", "slot", "speculative_generate_reference",
    "verify_metadata",
]
