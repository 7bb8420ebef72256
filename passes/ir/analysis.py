"""Analyses over a boundary graph: happens-before, races, token dependence.

Happens-before (hb) is what the hardware guarantees, whatever the timing:

* ops on one device stream run in issue order;
* the host runs its own ops in program order, and a device op cannot start
  before the host has issued it, so every host op hb the device ops after it;
* an event wait hb-follows the record it waits on;
* a host sync returns only after the device op that wrote what it waits on.

A graph is race-free when every RAW/WAR/WAW dependency is ordered by hb.
"""

from __future__ import annotations

from functools import cached_property

import networkx as nx

from .core import BoundaryGraph, OpKind, Placement


def happens_before_graph(graph: BoundaryGraph) -> nx.DiGraph:
    hb = nx.DiGraph()
    last_on_stream: dict[str, str] = {}
    last_host: str | None = None
    last_writer: dict[str, str] = {}
    for o in graph.ops:
        hb.add_node(o.name)
        prev = last_on_stream.get(o.stream)
        if prev is not None:
            hb.add_edge(prev, o.name, why="stream order")
        if not o.kind.on_host and last_host is not None:
            hb.add_edge(last_host, o.name, why="issued after")
        waits = o.kind in (OpKind.EVENT_WAIT, OpKind.HOST_SYNC)
        if waits:
            for v in o.reads:
                w = last_writer.get(v)
                if w is not None:
                    hb.add_edge(w, o.name, why=f"waits on {v}")
        for v in o.writes:
            last_writer[v] = o.name
        last_on_stream[o.stream] = o.name
        if o.kind.on_host:
            last_host = o.name
    return hb


class Ordering:
    """Reachability queries over the happens-before relation of one graph."""

    def __init__(self, graph: BoundaryGraph):
        self.graph = graph
        self.hb = happens_before_graph(graph)

    @cached_property
    def _closure(self) -> dict[str, set[str]]:
        order = list(nx.topological_sort(self.hb))
        after: dict[str, set[str]] = {}
        for n in reversed(order):
            acc: set[str] = set()
            for s in self.hb.successors(n):
                acc.add(s)
                acc |= after[s]
            after[n] = acc
        return after

    def ordered(self, a: str, b: str) -> bool:
        return b in self._closure[a]

    def after(self, a: str) -> set[str]:
        return self._closure[a]


def find_races(graph: BoundaryGraph, ordering: Ordering | None = None) -> list[tuple[str, str, str, str]]:
    """Unordered dependencies as (kind, value, first op, second op)."""
    ordering = ordering or Ordering(graph)
    races = []
    for a, b, data in graph.dependency_graph().edges(data=True):
        for kind, value in data["deps"]:
            if graph.values[value].placement is Placement.EVENT:
                continue
            if not ordering.ordered(a, b):
                races.append((kind, value, a, b))
    return races


def sync_dependents(graph: BoundaryGraph) -> dict[str, set[str]]:
    """For each host sync, the ops that would race without it (what it orders, RAW or WAR)."""
    out = {}
    for o in graph.ops:
        if o.kind is OpKind.HOST_SYNC:
            without = graph.with_ops([x for x in graph.ops if x.name != o.name])
            out[o.name] = {r[3] for r in find_races(without)}
    return out


def token_dependent(graph: BoundaryGraph) -> set[str]:
    """Ops whose inputs depend on the boundary's token sources (final draft / acceptance)."""
    tainted = set(graph.token_sources)
    dependent: set[str] = set()
    for o in graph.ops:
        if o.name == graph.start or tainted.intersection(o.reads):
            if o.kind is OpKind.EVENT_WAIT or o.kind is OpKind.EVENT_RECORD:
                continue
            dependent.add(o.name)
            tainted.update(o.writes)
    return dependent


def between(graph: BoundaryGraph, ordering: Ordering | None = None) -> list[str]:
    """Ops on an hb path from ``start`` to ``end`` (the bubble's candidates), in program order."""
    ordering = ordering or Ordering(graph)
    after_start = ordering.after(graph.start)
    return [
        o.name
        for o in graph.ops
        if o.name in after_start and (o.name == graph.end or ordering.ordered(o.name, graph.end))
    ]
