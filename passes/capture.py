"""capture: device work next to the graph replay on its stream joins the graph.

    before:  wait ev; token_update; metadata_update; tiling_update; replay[target_forward]
    after:   wait ev; replay[token_update, metadata_update, tiling_update, target_forward]

Starting from the replay, the pass walks its stream backwards (the graph's
head) and forwards (its tail) and takes kernels and copies whose every buffer
has a stable address.  Event waits met on the way move ahead of the graph
(waiting earlier is always safe).  The walk stops at the first op that
cannot enter, and the reason is noted.  Kernel-family ops enter first.
The replay records what its graph now runs: ``graph_ops`` (names),
``graph_steps`` (``PlanStep`` records) and ``kernel_families`` (the
``VariantSpec`` of every fused op that joined).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..specializations.plan import PlanStep
from .base import PassContext, no_worse
from .ir import BoundaryGraph, Op, OpKind, variant_of
from .ir.analysis import Ordering
from .ir.ordering import order_with_events

ENTERS = {OpKind.DEVICE_KERNEL, OpKind.H2D, OpKind.D2H}


@dataclass(frozen=True)
class Capture:
    name: ClassVar[str] = "capture"

    def apply(self, ctx: PassContext, graph: BoundaryGraph) -> BoundaryGraph:
        replays = [o for o in graph.ops if o.kind is OpKind.GRAPH_REPLAY]
        if not replays:
            return graph
        for replay in replays:
            graph = self._capture(ctx, graph, replay.name)
        return graph

    def _why_not(self, graph: BoundaryGraph, o: Op) -> str | None:
        if o.kind not in ENTERS:
            return f"{o.kind.value} cannot enter a captured graph"
        for v in (*o.reads, *o.writes):
            if not graph.values[v].persistent:
                return f"'{v}' has no stable address"
        return None

    def _capture(self, ctx: PassContext, graph: BoundaryGraph, replay_name: str) -> BoundaryGraph:
        replay = graph.op(replay_name)
        lane = [o for o in graph.ops if o.stream == replay.stream]
        at = lane.index(replay)
        head, waits, tail = [], [], []
        after_start = Ordering(graph).after(graph.start)
        for o in reversed(lane[:at]):
            if o.kind is OpKind.EVENT_WAIT:
                waits.append(o)
                continue
            why = self._why_not(graph, o)
            if why is None and o.name not in after_start:
                why = f"it overlaps '{graph.start}' where it is; inside the graph it would wait for it"
            if why:
                ctx.note(self.name, f"'{o.name}' stays outside the graph: {why}")
                break
            head.insert(0, o)
        for o in lane[at + 1 :]:
            if why := self._why_not(graph, o):
                if o.kind is not OpKind.EVENT_RECORD:
                    ctx.note(self.name, f"'{o.name}' stays outside the graph: {why}")
                break
            tail.append(o)
        head, tail = self._movable(ctx, graph, head, replay, tail)
        while head or tail:
            candidate = self._rebuild(graph, replay, head, tail, waits)
            if no_worse(None, self.name, graph, candidate, model=ctx.model) is candidate:
                return candidate
            dropped = head.pop(0) if head else tail.pop()
            ctx.note(self.name, f"'{dropped.name}' stays outside the graph: inside it would lengthen the bubble")
        return graph

    def _rebuild(self, graph: BoundaryGraph, replay: Op, head: list[Op], tail: list[Op], waits: list[Op]):
        members = head + [replay] + tail
        merged = self._merge(graph, replay, head, tail)
        names = {m.name for m in members}
        first = graph.index(members[0].name)
        waits = [w for w in waits if graph.index(w.name) > first]
        names |= {w.name for w in waits}
        # The graph stands where the replay stood, unless a tail member needs something
        # issued between them; then it stands where its last member stood.
        deps = graph.dependency_graph()
        at, last = graph.index(replay.name), graph.index(members[-1].name)
        gap = {o.name for o in graph.ops[at:last] if o.name not in names}
        if any(p in gap for m in tail for p in deps.predecessors(m.name)):
            at = last
        ops = [o for o in graph.ops[:at] if o.name not in names]
        ops += sorted(waits, key=lambda w: graph.index(w.name)) + [merged]
        ops += [o for o in graph.ops[at + 1 :] if o.name not in names]
        return order_with_events(graph.with_ops(ops))

    @staticmethod
    def _movable(ctx, graph: BoundaryGraph, head: list[Op], replay: Op, tail: list[Op]):
        """Shrink the region until no op outside it, issued in between, depends on a member."""
        deps = graph.dependency_graph()
        while True:
            members = head + [replay] + tail
            names = {m.name for m in members}
            lo, hi = graph.index(members[0].name), graph.index(members[-1].name)
            bad = [
                o.name
                for o in graph.ops[lo:hi]
                if o.name not in names
                and o.kind is not OpKind.EVENT_WAIT
                and any(p in names for p in deps.predecessors(o.name))
            ]
            if not bad:
                return head, tail
            ctx.note("capture", f"'{bad[0]}' depends on graph work issued before it; region shrinks")
            if tail:
                tail = tail[:-1]
            elif head:
                head = head[1:]

    @staticmethod
    def _merge(graph: BoundaryGraph, replay: Op, head: list[Op], tail: list[Op]) -> Op:
        members = head + [replay] + tail
        reads, writes, produced = [], [], set()
        for m in members:
            reads += [r for r in m.reads if r not in produced and r not in reads]
            writes += [w for w in m.writes if w not in writes]
            produced.update(m.writes)
        gops = [*map(_label, head), *replay.attr("graph_ops", (replay.name,)), *map(_label, tail)]
        steps = [*map(_step, head), *replay.attr("graph_steps", ()), *map(_step, tail)]
        variants = tuple(v for m in members if (v := variant_of(m)) is not None)

        def fn(*args):
            env = dict(zip(reads, args))
            for m in members:
                env.update(
                    zip(m.writes, m.fn(*(env[r] for r in m.reads)) if m.fn else (env[r].clone() for r in m.reads))
                )
            return tuple(env[w] for w in writes)

        n_copies = sum(1 for m in head + tail if m.kind is not OpKind.DEVICE_KERNEL)
        return Op(
            replay.name,
            OpKind.GRAPH_REPLAY,
            replay.stream,
            tuple(reads),
            tuple(writes),
            fn,
            replay.cost_us,
            {
                **replay.attrs,
                "graph_ops": tuple(gops),
                "graph_steps": tuple(steps),
                "captured_kernels": replay.attr("captured_kernels", 0) + len(head) + len(tail) - n_copies,
                "head_ops": replay.attr("head_ops", 0) + len(head),
                # the captured work after the replay's own (priced by the cost model in use, see ``bubble_us``)
                "tail_kernels": replay.attr("tail_kernels", 0) + sum(m.kind is OpKind.DEVICE_KERNEL for m in tail),
                "tail_copies": replay.attr("tail_copies", 0) + sum(m.kind is not OpKind.DEVICE_KERNEL for m in tail),
                "captured_copies": replay.attr("captured_copies", 0) + n_copies,
                "kernel_families": tuple(replay.attr("kernel_families", ())) + variants,
            },
        )


def _label(op: Op) -> str:
    """How an op that joins the graph is listed in ``graph_ops``: its variant key, else its name."""
    variant = variant_of(op)
    return variant.key if variant is not None else op.name


def _step(op: Op) -> PlanStep:
    """The plan record of an op that joins the graph."""
    variant = variant_of(op)
    if variant is not None:
        return PlanStep.kernel(variant)
    return PlanStep("copy" if op.kind in (OpKind.H2D, OpKind.D2H) else "other", op.name)
