"""The structural verifier: one rule table, per op kind, plus graph-wide checks.

Every failure raises ``BoundaryGraphError`` naming the op and its neighbours.
"""

from __future__ import annotations

from typing import Callable

import networkx as nx

from .analysis import Ordering, find_races
from .core import HOST, BoundaryGraph, BoundaryGraphError, Op, OpKind, Placement

P = Placement
_HOSTSIDE = {P.HOST, P.PINNED}
_DEVSIDE = {P.DEVICE, P.PINNED}

# kind -> (runs on host?, placements it may read, placements it may write)
RULES: dict[OpKind, tuple[bool, set[Placement], set[Placement]]] = {
    OpKind.DEVICE_KERNEL: (False, _DEVSIDE, _DEVSIDE),
    OpKind.GRAPH_REPLAY: (False, _DEVSIDE, _DEVSIDE),
    OpKind.H2D: (False, _HOSTSIDE, {P.DEVICE}),
    OpKind.D2H: (False, {P.DEVICE}, _HOSTSIDE),
    OpKind.EVENT_RECORD: (False, set(), {P.EVENT}),
    OpKind.EVENT_WAIT: (False, {P.EVENT}, set()),
    OpKind.HOST_COMPUTE: (True, _HOSTSIDE, _HOSTSIDE),
    OpKind.GRAPH_TASK_UPDATE: (True, _HOSTSIDE, _HOSTSIDE),
    OpKind.HOST_SYNC: (True, _HOSTSIDE | {P.EVENT, P.DEVICE}, set()),
}

# kinds whose every buffer must keep its address from capture to replay
STABLE_ADDRESS = frozenset({OpKind.GRAPH_REPLAY})

_ARITY: dict[OpKind, Callable[[Op], str | None]] = {
    OpKind.H2D: lambda o: (
        None if len(o.reads) == len(o.writes) >= 1 else "a copy reads and writes the same number of buffers"
    ),
    OpKind.D2H: lambda o: (
        None if len(o.reads) == len(o.writes) >= 1 else "a copy reads and writes the same number of buffers"
    ),
    OpKind.EVENT_RECORD: lambda o: None if len(o.writes) == 1 and not o.reads else "a record writes exactly one event",
    OpKind.EVENT_WAIT: lambda o: None if o.reads and not o.writes else "a wait reads events and writes nothing",
    OpKind.HOST_SYNC: lambda o: (
        None if o.reads and not o.writes else "a host sync waits on something and writes nothing"
    ),
}


def _fail(graph: BoundaryGraph, op: Op | str, message: str) -> BoundaryGraphError:
    name = op if isinstance(op, str) else op.name
    detail = ""
    if not isinstance(op, str):
        detail = f" ({op.kind.value} on stream '{op.stream}')"
    return BoundaryGraphError(
        f"{graph.name}: op '{name}'{detail}: {message}; neighbours: {graph.neighbours(name)}", op=name
    )


def verify_structure(graph: BoundaryGraph) -> None:
    names = [o.name for o in graph.ops]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise BoundaryGraphError(f"{graph.name}: duplicate op names {sorted(dupes)}", op=sorted(dupes)[0])
    for endpoint in (graph.start, graph.end):
        if endpoint not in names:
            raise BoundaryGraphError(f"{graph.name}: boundary endpoint '{endpoint}' is not an op", op=endpoint)
    defined = {k for k, v in graph.values.items() if v.is_input}
    for o in graph.ops:
        _check_op(graph, o, defined)
        defined.update(o.writes)
    for v in graph.outputs:
        if v not in defined:
            raise BoundaryGraphError(f"{graph.name}: output '{v}' is never written", op=None)
    if graph.index(graph.start) >= graph.index(graph.end):
        raise _fail(graph, graph.end, f"the boundary end is issued before its start '{graph.start}'")
    hb = Ordering(graph).hb
    if not nx.is_directed_acyclic_graph(hb):
        cycle = nx.find_cycle(hb)
        raise _fail(graph, cycle[0][0], f"happens-before cycle {[e[0] for e in cycle]}")


def _check_op(graph: BoundaryGraph, o: Op, defined: set[str]) -> None:
    on_host, may_read, may_write = RULES[o.kind]
    if on_host and o.stream != HOST:
        raise _fail(graph, o, f"a host op must run on the '{HOST}' stream")
    if not on_host and o.stream == HOST:
        raise _fail(graph, o, "a device op must run on a device stream, not the host")
    arity = _ARITY.get(o.kind)
    if arity and (msg := arity(o)):
        raise _fail(graph, o, msg)
    for v in o.reads:
        if v not in graph.values:
            raise _fail(graph, o, f"reads undeclared value '{v}'")
        if v not in defined:
            raise _fail(graph, o, f"reads '{v}', which nothing before it produces and which is not an input")
        if graph.values[v].placement not in may_read:
            raise _fail(
                graph,
                o,
                f"reads {graph.values[v].placement.value} buffer '{v}' "
                f"(a {o.kind.value} may read {sorted(p.value for p in may_read)})",
            )
    for v in o.writes:
        if v not in graph.values:
            raise _fail(graph, o, f"writes undeclared value '{v}'")
        if graph.values[v].placement not in may_write:
            raise _fail(
                graph,
                o,
                f"writes {graph.values[v].placement.value} buffer '{v}' "
                f"(a {o.kind.value} may write {sorted(p.value for p in may_write)})",
            )
    if o.kind in STABLE_ADDRESS:
        unstable = [v for v in (*o.reads, *o.writes) if not graph.values[v].persistent]
        if unstable:
            raise _fail(
                graph,
                o,
                f"a captured graph replays fixed addresses, but '{unstable[0]}' has no stable address (not persistent)",
            )


def verify_races(graph: BoundaryGraph) -> None:
    races = find_races(graph)
    if races:
        kind, value, a, b = races[0]
        raise _fail(
            graph,
            b,
            f"{kind.upper()} race on '{value}' with '{a}': no happens-before "
            f"(stream order, event, or host sync) orders them ({len(races)} race(s) in all)",
        )


def verify(graph: BoundaryGraph) -> None:
    verify_structure(graph)
    verify_races(graph)
