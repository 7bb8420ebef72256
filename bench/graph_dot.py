"""A captured CUDA graph's shape from its debug dump (``torch.cuda.CUDAGraph.debug_dump``, a DOT file): its nodes
with their kinds and its dependency edges, as a networkx graph, and the summary ``benchmarks/graph_nodes.py``
records (is it one chain of kernels, the graph a CUDA launch handles fastest: ``benchmarks/graph_shapes.py``)."""

from __future__ import annotations

import re
from collections import Counter

import networkx as nx

__all__ = ["is_chain", "read_dot", "summary"]

NODE = re.compile(r'^\s*"([^"]+)"\s*\[(.*?)\]\s*;?\s*$', re.S | re.M)
EDGE = re.compile(r'"([^"]+)"\s*->\s*"([^"]+)"')
LABEL = re.compile(r'label="(.*)"', re.S)
KIND = re.compile(r"^[A-Z][A-Z_]+$")  # CUDA's name of a node's type: KERNEL, MEMCPY, MEMSET, EVENT_WAIT, ...


def _kind(attrs: str) -> str:
    """The node's type: the first line of its label that is one upper-case word (``{KERNEL``, ``MEMCPY``,
    ``EVENT_WAIT``, ...), else ``?``."""
    label = LABEL.search(attrs)
    for line in (label.group(1) if label else "").splitlines():
        word = line.strip("{}| \t")
        if KIND.match(word):
            return word
    return "?"


def read_dot(text: str) -> nx.DiGraph:
    """The nodes (attribute ``kind``: CUDA's name of the node's type, ``?`` where the label names none) and the
    edges."""
    g = nx.DiGraph()
    for name, attrs in NODE.findall(text):
        g.add_node(name, kind=_kind(attrs))
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
    """Nodes by kind, whether it is one chain, its roots, forks (nodes with two successors or more), joins (two
    predecessors or more) and the longest path (in nodes).  A stream forked at a graph's start adds a root, not a
    fork."""
    return {
        "nodes": g.number_of_nodes(),
        "kinds": dict(Counter(k for _, k in g.nodes(data="kind"))),
        "chain": is_chain(g),
        "roots": sum(1 for _, d in g.in_degree() if d == 0),
        "forks": sum(1 for _, d in g.out_degree() if d > 1),
        "joins": sum(1 for _, d in g.in_degree() if d > 1),
        "longest_path": len(nx.dag_longest_path(g)) if g.number_of_nodes() else 0,
    }
