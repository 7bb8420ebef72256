"""The reference models: a Qwen3-style target over a paged KV cache, a Qwen3.5-style hybrid target
(Gated DeltaNet layers with their linear state in slot pools, ``qwen3_5.py``), the MTP draft head,
the DFlash / DSpark block drafts, the CUDA forward (Triton kernels, skinny GEMM), checkpoint
I/O and tensor-parallel sharding.

The forwards take fixed-shape metadata (no host syncs), so the same code can be captured in
CUDA graphs.
"""

from .errors import EngineError
from .mtp_head import MTPHead
from .paged_kv import (
    AttentionBatch,
    BlockAllocator,
    PagedKVCache,
    make_block_table,
    paged_attention,
    slot,
    verify_metadata,
)
from .qwen3 import PRESETS, ModelConfig, Qwen3Model
from .qwen3_5 import Qwen35Config, Qwen35Model

__all__ = [
    "AttentionBatch",
    "BlockAllocator",
    "EngineError",
    "MTPHead",
    "ModelConfig",
    "PRESETS",
    "PagedKVCache",
    "Qwen3Model",
    "Qwen35Config",
    "Qwen35Model",
    "make_block_table",
    "paged_attention",
    "slot",
    "verify_metadata",
]
