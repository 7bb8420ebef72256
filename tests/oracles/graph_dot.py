"""A captured CUDA graph's shape, read from its debug dump (``torch.cuda.CUDAGraph.debug_dump``, a DOT file): the
nodes with their kinds and the dependency edges, as a networkx graph."""

from __future__ import annotations

import re

import networkx as nx
import torch

NODE = re.compile(r'^\s*"([^"]+)"\s*\[(.*?)\]\s*;?\s*$', re.S | re.M)
EDGE = re.compile(r'"([^"]+)"\s*->\s*"([^"]+)"')
# a node's kind by the first word its label holds (any case): a kernel's label names its function, which may hold
# the other words, so the kernel comes first
KINDS = (("KERNEL", "kernel"), ("WAIT_EVENT", "wait"), ("EVENT_RECORD", "record"), ("MEMSET", "memset"),
         ("MEMCPY", "memcpy"), ("EMPTY", "empty"))  # fmt: skip


def debug_graph() -> torch.cuda.CUDAGraph:
    """A graph that keeps what ``debug_dump`` needs (debug mode is set before its capture)."""
    g = torch.cuda.CUDAGraph()
    g.enable_debug_mode()
    return g


def read_dot(text: str) -> nx.DiGraph:
    """The nodes (attribute ``kind``: the first of ``KINDS`` whose word the node's label holds, else ``?``) and
    the edges."""
    g = nx.DiGraph()
    for name, attrs in NODE.findall(text):
        kind = next((k for k, word in KINDS if word in attrs.lower()), "?")
        g.add_node(name, kind=kind)
    g.add_edges_from(EDGE.findall(text))
    return g


def is_chain(g: nx.DiGraph) -> bool:
    """Whether the graph is one chain: no node has two predecessors or two successors, and it is connected."""
    return (
        g.number_of_nodes() > 0
        and max(d for _, d in g.in_degree()) <= 1
        and max(d for _, d in g.out_degree()) <= 1
        and nx.is_weakly_connected(g)
    )
