"""Captured graphs and the boundary updates as plain / compiled torch over step buffers."""

from __future__ import annotations

from typing import Callable

import torch

from ..runtime import semantics
from ..runtime.device import DeviceAPI

__all__ = ["CapturedGraph", "compiled_updates", "head_update", "sampled_verify_tail", "verify_tail"]


class CapturedGraph:
    """``fn()`` captured once in a CUDA graph (after a side-stream warm-up), or run eagerly on the CPU."""

    def __init__(self, fn: Callable[[], None], device: torch.device, pool=None, warmup: int = 2):
        self.fn = fn
        self.graph = DeviceAPI("cuda").capture(fn, device, pool, warmup) if device.type == "cuda" else None

    def __call__(self) -> None:
        if self.graph is None:
            self.fn()
        else:
            self.graph.replay()


def head_update(b: dict, block_size: int, linear_state: bool = False) -> None:
    """The draft-to-verify updates (token, metadata, attention tiling, and a hybrid target's linear-state
    slots) as plain torch over step buffers."""
    head = "spec_verify_hybrid_head_update" if linear_state else "spec_verify_head_update"
    semantics.run_semantics(head, b, block_size=block_size)


TAIL_FAMILIES = ("greedy_prefix_verify", "prepare_next_draft")
SAMPLED_TAIL_FAMILIES = ("spec_rejection_verify", "prepare_next_draft")  # after the vocabulary pass


def tail_family(family: str, b: dict, block_size: int) -> None:
    """One family of the verify tail (``TAIL_FAMILIES``) as plain torch over step buffers."""
    semantics.run_semantics(family, b, block_size=block_size)


def verify_tail(b: dict, block_size: int) -> None:
    """Greedy acceptance and next-draft preparation as plain torch over step buffers."""
    for family in TAIL_FAMILIES:
        tail_family(family, b, block_size)


def sampled_verify_tail(b: dict, block_size: int) -> None:
    """Sampled acceptance (over the vocabulary pass's outputs) and next-draft preparation as plain torch."""
    for family in SAMPLED_TAIL_FAMILIES:
        tail_family(family, b, block_size)


_COMPILED: dict[str, tuple] = {}


def compiled_updates(backend: str) -> tuple:
    """``head_update``, ``verify_tail`` and ``sampled_verify_tail`` under ``torch.compile`` (one specialization per
    buffer shape)."""
    if backend not in _COMPILED:
        cfg = torch._dynamo.config
        name = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
        # every (batch, width) is its own static-shape graph; the default limit of 8 would quietly
        # send later shapes to eager execution
        setattr(cfg, name, max(getattr(cfg, name), 256))
        opts = dict(backend=backend, fullgraph=True, dynamic=False)
        _COMPILED[backend] = tuple(torch.compile(f, **opts) for f in (head_update, verify_tail, sampled_verify_tail))
    return _COMPILED[backend]
