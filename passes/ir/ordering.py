"""Restore happens-before for dependencies a transformation left unordered.

Device -> device across streams: an event recorded after the producer and
waited on the consumer's stream just before the consumer.  Device -> host:
a host sync just before the host consumer, on the value when the device op
wrote it, else (the host overwrites what a device op still reads: WAR) on an
event recorded right after the device op.  Host -> device needs nothing
(issue order), as long as the producer comes first in program order.
"""

from __future__ import annotations

from .analysis import Ordering, find_races
from .core import HOST, BoundaryGraph, BoundaryGraphError, Op, OpKind, Placement, Value


def order_with_events(graph: BoundaryGraph, max_rounds: int = 256) -> BoundaryGraph:
    for _ in range(max_rounds):
        races = find_races(graph, Ordering(graph))
        if not races:
            return graph
        _kind, value, a, b = races[0]
        graph = _order_pair(graph, graph.op(a), graph.op(b), value)
    raise BoundaryGraphError(f"{graph.name}: could not order its dependencies with events")


def _order_pair(graph: BoundaryGraph, a: Op, b: Op, value: str) -> BoundaryGraph:
    ops = list(graph.ops)
    values = dict(graph.values)
    ia, ib = graph.index(a.name), graph.index(b.name)
    if ia > ib:
        raise BoundaryGraphError(
            f"{graph.name}: '{b.name}' needs '{value}' from '{a.name}', which is issued after it", op=b.name
        )
    if b.kind.on_host and value in a.writes:  # a sync on the value waits for its last writer, a
        sync = Op(graph.fresh_name(f"sync_{a.name}"), OpKind.HOST_SYNC, HOST, (value,))
        ops.insert(ib, sync)
        return graph.with_ops(ops, values)
    if b.kind.on_host:  # the host rewrites what a device op reads (WAR): wait for an event recorded after it
        event = graph.fresh_name(f"ev_{a.name}")
        values[event] = Value(event, Placement.EVENT)
        ops.insert(ib, Op(graph.fresh_name(f"sync_{a.name}"), OpKind.HOST_SYNC, HOST, (event,)))
        ops.insert(ia + 1, Op(f"record_{event}", OpKind.EVENT_RECORD, a.stream, (), (event,)))
        return graph.with_ops(ops, values)
    # One event serves every later consumer on b's stream: record it after the last op
    # of a's stream, issued before b, that any of them depends on.
    deps = graph.dependency_graph()
    consumers = [y.name for y in ops[ib:] if y.stream == b.stream]
    needed = [
        i for i, x in enumerate(ops[:ib]) if x.stream == a.stream and any(deps.has_edge(x.name, y) for y in consumers)
    ]
    at = max(needed + [ia]) + 1
    event = graph.fresh_name(f"ev_{ops[at - 1].name}")
    values[event] = Value(event, Placement.EVENT)
    rec = Op(f"record_{event}", OpKind.EVENT_RECORD, a.stream, (), (event,))
    wait = Op(f"wait_{event}_{b.stream}", OpKind.EVENT_WAIT, b.stream, (event,), ())
    ops.insert(ib, wait)
    ops.insert(at, rec)
    return graph.with_ops(ops, values)
