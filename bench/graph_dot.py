"""A captured CUDA graph's shape from its debug dump (``torch.cuda.CUDAGraph.debug_dump``, a DOT file): its nodes
with their kinds and its dependency edges, as a networkx graph, and the summary ``benchmarks/graph_nodes.py``
records (is it one chain of kernels, the graph a CUDA launch handles fastest: ``benchmarks/graph_shapes.py``)."""

from __future__ import annotations

import re
from collections import Counter

import networkx as nx

__all__ = ["KINDS", "is_chain", "read_dot", "summary"]

NODE = re.compile(r'^\s*"([^"]+)"\s*\[(.*?)\]\s*;?\s*$', re.S | re.M)
EDGE = re.compile(r'"([^"]+)"\s*->\s*"([^"]+)"')
# a node's kind by the first word its label holds (any case): a kernel's label names its function, which may hold
# the other words, so the kernel comes first
KINDS = (("KERNEL", "kernel"), ("WAIT_EVENT", "wait"), ("EVENT_RECORD", "record"), ("MEMSET", "memset"),
         ("MEMCPY", "memcpy"), ("EMPTY", "empty"))  # fmt: skip


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


def summary(g: nx.DiGraph) -> dict:
    """Nodes by kind, whether it is one chain, its roots and the longest path (in nodes)."""
    return {
        "nodes": g.number_of_nodes(),
        "kinds": dict(Counter(k for _, k in g.nodes(data="kind"))),
        "chain": is_chain(g),
        "roots": sum(1 for _, d in g.in_degree() if d == 0),
        "forks": sum(1 for _, d in g.out_degree() if d > 1),
        "longest_path": len(nx.dag_longest_path(g)) if g.number_of_nodes() else 0,
    }
