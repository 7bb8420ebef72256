"""hoist: token-independent host work moves ahead, overlapping the final draft.

    before:  final_draft; sync; host_stack; h2d_seq_lens(target); update_graph_task; replay
    after:   final_draft; h2d_seq_lens(prepare); update_graph_task; sync; host_stack; replay

Hoisted ops go right after the start op's issue (so the host prepares while
the final draft runs on the device); H2D copies move to the prepare stream.
Only host work and copies move: syncs and events stay where they are (they
are effects), device kernels stay for the capture pass, and an op moves only
if nothing it depends on stays behind, a sync it needs (it would race without
it) included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import PassContext, no_worse
from .ir import BoundaryGraph, OpKind
from .ir.analysis import between, sync_dependents, token_dependent
from .ir.ordering import order_with_events

MOVABLE = {OpKind.HOST_COMPUTE, OpKind.GRAPH_TASK_UPDATE, OpKind.H2D}


@dataclass(frozen=True)
class Hoist:
    name: ClassVar[str] = "hoist"

    def apply(self, ctx: PassContext, graph: BoundaryGraph) -> BoundaryGraph:
        # Prefer moving all token-independent work; if a move only adds event traffic to
        # the critical path, fall back to the ops that sit in the bubble now, else to nothing.
        in_bubble = set(between(graph))
        for allowed in (None, in_bubble):
            candidate, moved = self._hoist(graph, allowed)
            if no_worse(None, self.name, graph, candidate, model=ctx.model) is candidate:
                if moved:
                    ctx.note(
                        self.name, f"moved {len(moved)} op(s) ahead of '{graph.start}'s completion: " + ", ".join(moved)
                    )
                return candidate
        ctx.note(self.name, "nothing moved: every move would lengthen the bubble")
        return graph

    def _hoist(self, graph: BoundaryGraph, allowed: set[str] | None) -> tuple[BoundaryGraph, list[str]]:
        dependent = token_dependent(graph)
        deps = graph.dependency_graph()
        first = graph.index(graph.start) + 1
        prepare = graph.params.get("prepare_stream", "prepare")
        moved, staying, stays = [], [], set()
        moved_to: dict[str, str | None] = {}  # original stream -> where its last op went, if it moved
        needs_sync = sync_dependents(graph)
        for o in graph.ops[first:]:
            # a staying op it depends on, or a staying sync it needs (it would race without it), holds it back
            blocked = any(p in stays for p in deps.predecessors(o.name)) or any(
                o.name in needs_sync[s] for s in stays if s in needs_sync
            )
            stream = prepare if o.kind is OpKind.H2D else o.stream
            # a record travels with the op it marks (and to its new stream)
            if o.kind is OpKind.EVENT_RECORD and moved_to.get(o.stream):
                stream = moved_to[o.stream]
                follows = True
            else:
                follows = False
            eligible = allowed is None or o.name in allowed or follows
            if (o.kind in MOVABLE or follows) and eligible and o.name not in dependent and not blocked:
                moved.append(o.with_(stream=stream))
                moved_to[o.stream] = stream
            else:
                staying.append(o)
                stays.add(o.name)
                moved_to[o.stream] = None
        ops = [*graph.ops[:first], *moved, *staying]
        if ops == list(graph.ops):
            return graph, []
        return order_with_events(graph.with_ops(ops)), [o.name for o in moved]
