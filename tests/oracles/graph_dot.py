"""A captured CUDA graph's shape for the GPU tests: a graph whose debug dump can be read (``bench/graph_dot.py``
reads it into networkx)."""

from __future__ import annotations

import torch

from specgen.bench.graph_dot import is_chain, read_dot

__all__ = ["debug_graph", "is_chain", "read_dot"]


def debug_graph() -> torch.cuda.CUDAGraph:
    """A graph that keeps what ``debug_dump`` needs: its ``cudaGraph_t`` (instantiated on the first replay) and
    debug mode, set before its capture."""
    g = torch.cuda.CUDAGraph(keep_graph=True)
    g.enable_debug_mode()
    return g
