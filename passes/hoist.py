"""hoist: token-independent host work moves ahead, overlapping the final draft.

    before:  final_draft; sync; host_stack; h2d_seq_lens(target); update_graph_task; replay
    after:   final_draft; h2d_seq_lens(prepare); update_graph_task; sync; host_stack; replay

Hoisted ops go right after the start op's issue (so the host prepares while
the final draft runs on the device); H2D copies move to the prepare stream.
Only host work and copies move: syncs and events stay where they are (they
are effects), device kernels stay for the capture pass, and an op moves only
if nothing it depends on stays behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .analysis import token_dependent
from .base import PassContext
from .ir import BoundaryGraph, OpKind
from .ordering import order_with_events

MOVABLE = {OpKind.HOST_COMPUTE, OpKind.GRAPH_TASK_UPDATE, OpKind.H2D}


@dataclass(frozen=True)
class Hoist:
    name: ClassVar[str] = "hoist"

    def apply(self, ctx: PassContext, graph: BoundaryGraph) -> BoundaryGraph:
        dependent = token_dependent(graph)
        deps = graph.dependency_graph()
        first = graph.index(graph.start) + 1
        prepare = graph.params.get("prepare_stream", "prepare")
        moved, staying, stays = [], [], set()
        last_moved_on: dict[str, bool] = {}
        for o in graph.ops[first:]:
            blocked = any(p in stays for p in deps.predecessors(o.name))
            stream = prepare if o.kind is OpKind.H2D else o.stream
            # a record travels with the op it marks, so running the pass twice changes nothing
            follows = o.kind is OpKind.EVENT_RECORD and last_moved_on.get(o.stream, False)
            if (o.kind in MOVABLE or follows) and o.name not in dependent and not blocked:
                moved.append(o.with_(stream=stream))
                last_moved_on[stream] = True
            else:
                staying.append(o)
                stays.add(o.name)
                last_moved_on[o.stream] = False
        ops = [*graph.ops[:first], *moved, *staying]
        if [o for o in ops] == list(graph.ops):
            return graph
        ctx.note(self.name, f"moved {len(moved)} op(s) ahead of '{graph.start}'s completion: "
                 + ", ".join(o.name for o in moved))
        return order_with_events(graph.with_ops(ops))
