"""The boundary IR: ops over values, issued by the host in program order.

A boundary graph is a *program*: the host walks ``ops`` in order, running
host ops itself and issuing device ops onto their streams.  Every op says
what it reads and writes; the dependency graph (RAW/WAR/WAW edges between
ops) is derived from those sets and never stored beside them.

    h2d_positions   H2D        stream=target reads=[positions_host] writes=[positions]
    target_replay   GRAPH_REPLAY stream=target reads=[positions, ...] writes=[target_tokens]

Attributes an op may carry (``Op.attrs``): ``family`` (the kernel family a
host or device update belongs to, before fusion), ``variant`` (the
``VariantSpec`` a fused op launches; see ``variant_of``), ``members`` (the ops
a fused op replaced), and on a graph replay ``graph_ops`` / ``graph_steps`` /
``kernel_families`` (what its captured graph runs).
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import networkx as nx

from ...specializations.variants import VariantSpec

HOST = "host"


class OpKind(str, enum.Enum):
    DEVICE_KERNEL = "device_kernel"
    HOST_COMPUTE = "host_compute"
    H2D = "h2d"
    D2H = "d2h"
    HOST_SYNC = "host_sync"
    EVENT_RECORD = "event_record"
    EVENT_WAIT = "event_wait"
    GRAPH_REPLAY = "graph_replay"
    GRAPH_TASK_UPDATE = "graph_task_update"

    @property
    def on_host(self) -> bool:
        return self in HOST_KINDS

    @property
    def is_host_call(self) -> bool:
        """Work the host performs or waits on (what a bubble is made of)."""
        return self in HOST_CALL_KINDS


HOST_KINDS = frozenset({OpKind.HOST_COMPUTE, OpKind.HOST_SYNC, OpKind.GRAPH_TASK_UPDATE})
HOST_CALL_KINDS = HOST_KINDS | {OpKind.H2D, OpKind.D2H}


class Placement(str, enum.Enum):
    HOST = "host"  # pageable host memory: the device cannot read it
    PINNED = "pinned"  # page-locked host memory: async copies and device reads
    DEVICE = "device"
    EVENT = "event"  # a device event; written by a record, read by waits/syncs


@dataclass(frozen=True, slots=True)
class Value:
    name: str
    placement: Placement
    shape: tuple[Any, ...] = ()
    dtype: str = "int32"
    persistent: bool = False  # a stable address that a captured graph may read
    is_input: bool = False  # defined before the boundary starts
    init: str = "zeros"  # how the interpreter draws an input (see interpreter.py)

    @property
    def device_visible(self) -> bool:
        return self.placement in (Placement.DEVICE, Placement.PINNED)


# Reference semantics: called with the values of ``reads`` (positionally), returns
# the values of ``writes`` as a tuple in the same order.  Positional, so that
# renaming a value never touches the function.
Semantics = Callable[..., tuple]


@dataclass(frozen=True, slots=True)
class Op:
    name: str
    kind: OpKind
    stream: str
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    fn: Semantics | None = field(default=None, compare=False, repr=False)
    cost_us: float | None = None  # None: the cost model's default for the kind
    attrs: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def with_(self, **changes) -> "Op":
        return dataclasses.replace(self, **changes)

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)


def variant_of(op: Op) -> VariantSpec | None:
    """The kernel variant a fused op launches (its ``variant`` attr); None for any other op.

    Fusion is what gives an op a variant: before it an op carries only its
    ``family`` tag, after it the ``VariantSpec`` that names family and layout.
    """
    return op.attrs.get("variant")


class BoundaryGraphError(ValueError):
    """A malformed boundary graph; the message names the op and its neighbours."""

    def __init__(self, message: str, op: str | None = None):
        super().__init__(message)
        self.op = op


@dataclass(frozen=True)
class BoundaryGraph:
    """A boundary between two pipeline stages, as a host program.

    ``start`` is the op after which the bubble begins (the final draft, or the
    verification); ``end`` is the op the bubble delays (the verification, or
    the next draft).  ``outputs`` are the values compared by the interpreter.
    """

    name: str
    ops: tuple[Op, ...]
    values: Mapping[str, Value]
    start: str
    end: str
    outputs: tuple[str, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)
    token_sources: tuple[str, ...] = ()  # values carrying the token (or acceptance) result

    # -- lookup -----------------------------------------------------------
    def op(self, name: str) -> Op:
        for o in self.ops:
            if o.name == name:
                return o
        raise KeyError(name)

    def index(self, name: str) -> int:
        for i, o in enumerate(self.ops):
            if o.name == name:
                return i
        raise KeyError(name)

    def streams(self) -> list[str]:
        seen: dict[str, None] = {}
        for o in self.ops:
            seen.setdefault(o.stream, None)
        return list(seen)

    def with_ops(self, ops: Iterable[Op], values: Mapping[str, Value] | None = None) -> "BoundaryGraph":
        ops = tuple(ops)
        vals = dict(values if values is not None else self.values)
        used = {v for o in ops for v in (*o.reads, *o.writes)} | set(self.outputs)
        vals = {k: v for k, v in vals.items() if k in used}
        return dataclasses.replace(self, ops=ops, values=vals)

    def fresh_name(self, base: str) -> str:
        taken = {o.name for o in self.ops} | set(self.values)
        if base not in taken:
            return base
        i = 1
        while f"{base}_{i}" in taken:
            i += 1
        return f"{base}_{i}"

    # -- derived structure --------------------------------------------------
    def dependency_graph(self) -> nx.DiGraph:
        """RAW/WAR/WAW edges between ops, derived from reads and writes in program order."""
        g = nx.DiGraph()
        last_writer: dict[str, str] = {}
        readers_since_write: dict[str, list[str]] = {}
        for o in self.ops:
            g.add_node(o.name)
            for v in dict.fromkeys(o.reads):
                if v in last_writer:
                    _add_edge(g, last_writer[v], o.name, "raw", v)
            for v in dict.fromkeys(o.writes):
                for r in readers_since_write.get(v, []):
                    if r != o.name:
                        _add_edge(g, r, o.name, "war", v)
                if v in last_writer and last_writer[v] != o.name:
                    _add_edge(g, last_writer[v], o.name, "waw", v)
            for v in dict.fromkeys(o.reads):
                readers_since_write.setdefault(v, []).append(o.name)
            for v in dict.fromkeys(o.writes):
                last_writer[v] = o.name
                readers_since_write[v] = []
        return g

    def writers(self, value: str) -> list[str]:
        return [o.name for o in self.ops if value in o.writes]

    def readers(self, value: str) -> list[str]:
        return [o.name for o in self.ops if value in o.reads]

    def neighbours(self, op_name: str) -> str:
        g = self.dependency_graph()
        if op_name not in g:
            return "(not in graph)"
        preds = sorted(g.predecessors(op_name))
        succs = sorted(g.successors(op_name))
        return f"preds [{', '.join(preds) or '-'}], succs [{', '.join(succs) or '-'}]"


def _add_edge(g: nx.DiGraph, a: str, b: str, kind: str, value: str) -> None:
    if g.has_edge(a, b):
        g.edges[a, b]["deps"].append((kind, value))
    else:
        g.add_edge(a, b, deps=[(kind, value)])
