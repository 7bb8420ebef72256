"""The decode engine over the test model: a Qwen3-style target over a paged KV
cache, its MTP draft head, host-driven greedy / speculative decoding and
``SpecDecodeEngine`` with its boundary modes.

The forwards take fixed-shape metadata (no host syncs), so the same code can
be captured in CUDA graphs; the host-driven decode loops are the ground truth
for the tokens any optimised runtime must produce.
"""

from .acceptance import AcceptanceMix
from .decode import SpecStats, greedy_generate, greedy_prefix, speculative_generate
from .draft import MTPHead
from .engine import SpecDecodeEngine
from .errors import EngineError
from .model import PRESETS, ModelConfig, Qwen3Model
from .modes import MODES, Mode, register_mode
from .mode_inductor import InductorMode  # registers the inductor mode
from .paged_kv import (AttentionBatch, BlockAllocator, PagedKVCache, make_block_table,
                       paged_attention, slot, verify_metadata)
from .results import RunResult, StepTiming

__all__ = [
    "AcceptanceMix", "AttentionBatch", "BlockAllocator", "EngineError", "InductorMode", "MODES", "MTPHead", "Mode",
    "ModelConfig", "PRESETS", "PagedKVCache", "Qwen3Model", "RunResult", "SpecDecodeEngine", "SpecStats",
    "StepTiming", "greedy_generate", "greedy_prefix", "make_block_table", "paged_attention",
    "register_mode", "slot", "speculative_generate", "verify_metadata",
]
