"""fuse: chains of small device updates become one kernel-family op.

    before:  dev_positions; dev_slots; dev_kv_lens; dev_query_start     (4 launches)
    after:   spec_verify_metadata_update{w4_bt64_bs128}                 (1 launch)

Device kernels carrying the same ``family`` attribute fuse when they share a
stream, write only persistent buffers (or temporaries read inside the group)
and no other op sits on a dependency path between them.  The fused op
carries its ``variant`` (a ``VariantSpec``: family at the boundary's layout);
its semantics are the composition of its members'.  Every refusal is noted
with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Mapping

from ..specializations.families import DEFAULT_NUM_SPLITS, FAMILIES
from ..specializations.variants import Layout, VariantSpec
from .base import PassContext, no_worse
from .ir import BoundaryGraph, Op, OpKind, variant_of
from .ir.ordering import order_with_events


class WhyNoFuse(Exception):
    def __init__(self, family: str, fmt: str, *args):
        super().__init__(f"{family}: not fused: " + fmt % args)


@dataclass(frozen=True)
class Fuse:
    name: ClassVar[str] = "fuse"
    max_group: int = 16

    def apply(self, ctx: PassContext, graph: BoundaryGraph) -> BoundaryGraph:
        groups: dict[str, list[Op]] = {}
        for o in graph.ops:
            fam = o.attr("family")
            if fam and o.kind is OpKind.DEVICE_KERNEL and variant_of(o) is None and not o.attr("unfused"):
                groups.setdefault(fam, []).append(o)
        for fam, members in groups.items():
            try:
                fused = order_with_events(self._fuse(graph, fam, members))
                if no_worse(None, self.name, graph, fused, model=ctx.model) is graph:
                    raise WhyNoFuse(fam, "the fused op would lengthen the bubble")
                graph = fused
            except WhyNoFuse as why:
                ctx.note(self.name, str(why))
                # the refusal stays on the ops, so a later run does not fuse what is left of the group
                refused = {m.name for m in members}
                graph = graph.with_ops(
                    [o.with_(attrs={**o.attrs, "unfused": str(why)}) if o.name in refused else o for o in graph.ops]
                )
        return graph

    def _fuse(self, graph: BoundaryGraph, fam: str, members: list[Op]) -> BoundaryGraph:
        if fam not in FAMILIES:
            raise WhyNoFuse(fam, "no kernel family of that name")
        if len(members) > self.max_group:
            raise WhyNoFuse(fam, "%d members exceed max-group=%d", len(members), self.max_group)
        stream = one_stream(fam, members)
        names = {m.name for m in members}
        written = {w for m in members for w in m.writes}
        for w in written:
            outside = [r for r in graph.readers(w) if r not in names]
            if outside and not graph.values[w].persistent:
                raise WhyNoFuse(fam, "'%s' is not persistent and '%s' reads it", w, outside[0])
        internal = {
            w
            for w in written
            if not graph.values[w].persistent and graph.readers(w) and all(r in names for r in graph.readers(w))
        }
        reads, produced = [], set()
        for m in members:
            reads += [r for r in m.reads if r not in produced and r not in reads]
            produced.update(m.writes)
        writes = tuple(w for w in dict.fromkeys(w for m in members for w in m.writes) if w not in internal)
        return replace_with_fused(graph, members, fam, stream, tuple(reads), writes, tuple(m.name for m in members))


def one_stream(family: str, members: list[Op]) -> str:
    """The stream all ``members`` share; a fused op cannot span streams."""
    streams = sorted({m.stream for m in members})
    if len(streams) > 1:
        raise WhyNoFuse(family, "stream mismatch %s", " vs ".join(streams))
    return streams[0]


def variant_at(family: str, params: Mapping) -> VariantSpec:
    """``family`` specialized at the boundary's layout (its graph parameters)."""
    layout = Layout(
        params["width"], params["block_table_width"], params["block_size"], params.get("draft_dtype", "int32")
    )
    return VariantSpec.of(family, layout, params.get("num_splits", DEFAULT_NUM_SPLITS))


def replace_with_fused(
    graph: BoundaryGraph,
    members: list[Op],
    family: str,
    stream: str,
    reads: tuple[str, ...],
    writes: tuple[str, ...],
    member_names: tuple[str, ...],
) -> BoundaryGraph:
    """``graph`` with ``members`` replaced by one launch of ``family``, where the dependencies allow."""
    pos = fusion_position(graph, members)
    fused = Op(
        graph.fresh_name(family),
        OpKind.DEVICE_KERNEL,
        stream,
        reads,
        writes,
        _compose(members, reads, writes),
        None,
        {"family": family, "variant": variant_at(family, graph.params), "members": member_names},
    )
    names = {m.name for m in members}
    ops = [o for o in graph.ops if o.name not in names]
    anchor = sum(1 for o in graph.ops[:pos] if o.name not in names)
    ops.insert(anchor, fused)
    return graph.with_ops(ops)


def fusion_position(graph: BoundaryGraph, members: list[Op]) -> int:
    """Where the fused op can stand: the last member's slot, else the first's."""
    idx = sorted(graph.index(m.name) for m in members)
    names = {m.name for m in members}
    deps = graph.dependency_graph()
    between = [o.name for o in graph.ops[idx[0] : idx[-1]] if o.name not in names]
    if not any(deps.has_edge(m, o) and graph.index(m) < graph.index(o) for o in between for m in names):
        return idx[-1] + 1
    if not any(deps.has_edge(o, m) and graph.index(o) < graph.index(m) for o in between for m in names):
        return idx[0]
    family = members[0].attr("family")
    raise WhyNoFuse(family, "ops between the members depend on them both ways (%s)", ", ".join(between))


def _compose(members: list[Op], reads: tuple[str, ...], writes: tuple[str, ...]):
    def fn(*args):
        env = dict(zip(reads, args))
        for m in members:
            env.update(zip(m.writes, m.fn(*(env[r] for r in m.reads))))
        return tuple(env[w] for w in writes)

    return fn
