"""fuse: chains of small device updates become one kernel-family op.

    before:  dev_positions; dev_slots; dev_kv_lens; dev_query_start     (4 launches)
    after:   spec_verify_metadata_update{w4_bt64_bs128}                 (1 launch)

Device kernels carrying the same ``family`` attribute fuse when they share a
stream, write only persistent buffers (or temporaries read inside the group)
and no other op sits on a dependency path between them.  The fused op
carries its specialization key (family, width, block-table width, block size,
draft dtype); its semantics are the composition of its members'.  Every
refusal is noted with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..specializations.families import COMPOSITES, FAMILIES
from ..specializations.variants import Layout, VariantSpec
from .base import PassContext
from .cost import bubble_us
from .ir import BoundaryGraph, Op, OpKind
from .ordering import order_with_events


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
            if fam and o.kind is OpKind.DEVICE_KERNEL and not o.attr("key") and not o.attr("unfused"):
                groups.setdefault(fam, []).append(o)
        for fam, members in groups.items():
            try:
                fused = order_with_events(self._fuse(graph, fam, members))
                if bubble_us(fused) > bubble_us(graph) + 1e-9:
                    raise WhyNoFuse(fam, "the fused op would lengthen the bubble")
                graph = fused
            except WhyNoFuse as why:
                ctx.note(self.name, str(why))
                # the refusal stays on the ops, so a later run does not fuse what is left of the group
                refused = {m.name for m in members}
                graph = graph.with_ops([o.with_(attrs={**o.attrs, "unfused": str(why)}) if o.name in refused else o
                                        for o in graph.ops])
        return graph

    def _fuse(self, graph: BoundaryGraph, fam: str, members: list[Op]) -> BoundaryGraph:
        if fam not in FAMILIES:
            raise WhyNoFuse(fam, "no kernel family of that name")
        if len(members) > self.max_group:
            raise WhyNoFuse(fam, "%d members exceed max-group=%d", len(members), self.max_group)
        streams = sorted({m.stream for m in members})
        if len(streams) > 1:
            raise WhyNoFuse(fam, "stream mismatch %s", " vs ".join(streams))
        names = {m.name for m in members}
        written = {w for m in members for w in m.writes}
        for w in written:
            outside = [r for r in graph.readers(w) if r not in names]
            if outside and not graph.values[w].persistent:
                raise WhyNoFuse(fam, "'%s' is not persistent and '%s' reads it", w, outside[0])
        pos = self._position(graph, members)
        internal = {w for w in written if not graph.values[w].persistent and graph.readers(w)
                    and all(r in names for r in graph.readers(w))}
        reads, produced = [], set()
        for m in members:
            reads += [r for r in m.reads if r not in produced and r not in reads]
            produced.update(m.writes)
        writes = tuple(w for w in dict.fromkeys(w for m in members for w in m.writes) if w not in internal)
        p = graph.params
        variant = VariantSpec.of(fam, _layout(p), p.get("num_splits", 8))
        key = variant.key
        fused = Op(graph.fresh_name(fam), OpKind.DEVICE_KERNEL, streams[0], tuple(dict.fromkeys(reads)), writes,
                   _compose(members, tuple(dict.fromkeys(reads)), writes), None,
                   {"family": fam, "key": key, "variant": variant, "width": p["width"], "block_table_width": p["block_table_width"],
                    "block_size": p["block_size"], "draft_dtype": p.get("draft_dtype", "int32"),
                    "members": tuple(m.name for m in members)})
        ops = [o for o in graph.ops if o.name not in names]
        anchor = sum(1 for o in graph.ops[:pos] if o.name not in names)
        ops.insert(anchor, fused)
        return graph.with_ops(ops)

    @staticmethod
    def _position(graph: BoundaryGraph, members: list[Op]) -> int:
        """Where the fused op can stand: the last member's slot, else the first's."""
        idx = sorted(graph.index(m.name) for m in members)
        names = {m.name for m in members}
        deps = graph.dependency_graph()
        between = [o.name for o in graph.ops[idx[0]:idx[-1]] if o.name not in names]
        if not any(deps.has_edge(m, o) and graph.index(m) < graph.index(o) for o in between for m in names):
            return idx[-1] + 1
        if not any(deps.has_edge(o, m) and graph.index(o) < graph.index(m) for o in between for m in names):
            return idx[0]
        raise WhyNoFuse(members[0].attr("family"), "ops between the members depend on them both ways (%s)",
                        ", ".join(between))


def _layout(params: dict, draft_dtype: str | None = None) -> Layout:
    return Layout(params["width"], params["block_table_width"], params["block_size"],
                  draft_dtype or params.get("draft_dtype", "int32"))


def _compose(members: list[Op], reads: tuple[str, ...], writes: tuple[str, ...]):
    def fn(*args):
        env = dict(zip(reads, args))
        for m in members:
            env.update(zip(m.writes, m.fn(*(env[r] for r in m.reads))))
        return tuple(env[w] for w in writes)
    return fn


@dataclass(frozen=True)
class FuseChain:
    """fuse-chain: family kernels that form a composite family become one launch.

        before:  spec_verify_token_update{w4}; spec_verify_metadata_update{w4_bt64_bs128};
                 spec_verify_attention_tiling_update{w4_bs128}                      (3 launches)
        after:   spec_verify_head_update{w4_bt64_bs128}                             (1 launch)

    A composite (``codegen.families.COMPOSITES``) applies when every member is
    present once as a keyed kernel op (the output of ``fuse``), all on one
    stream, no member reads another's output, and no op between them depends
    on them both ways.  The semantics are the members' composition.  Refusals
    are noted with their reason, like ``fuse``'s.
    """

    name: ClassVar[str] = "fuse-chain"

    def apply(self, ctx: PassContext, graph: BoundaryGraph) -> BoundaryGraph:
        from ..specializations.families import COMPOSITES

        for comp, member_fams in COMPOSITES.items():
            found = [[o for o in graph.ops if o.kind is OpKind.DEVICE_KERNEL and o.attr("key")
                      and o.attr("family") == fam] for fam in member_fams]
            if not any(found):
                continue
            try:
                if any(len(f) != 1 for f in found):
                    missing = [fam for fam, f in zip(member_fams, found) if len(f) != 1]
                    raise WhyNoFuse(comp, "members %s are not each one fused op", ", ".join(missing))
                fused = order_with_events(self._chain(graph, comp, [f[0] for f in found]))
                if bubble_us(fused) > bubble_us(graph) + 1e-9:
                    raise WhyNoFuse(comp, "the composite would lengthen the bubble")
                graph = fused
            except WhyNoFuse as why:
                ctx.note(self.name, str(why))
        return graph

    def _chain(self, graph: BoundaryGraph, comp: str, members: list[Op]) -> BoundaryGraph:
        streams = sorted({m.stream for m in members})
        if len(streams) > 1:
            raise WhyNoFuse(comp, "stream mismatch %s", " vs ".join(streams))
        written = {w for m in members for w in m.writes}
        if any(r in written for m in members for r in m.reads):
            raise WhyNoFuse(comp, "a member reads another member's output")
        names = {m.name for m in members}
        pos = Fuse._position(graph, members)
        reads = tuple(dict.fromkeys(r for m in members for r in m.reads))
        writes = tuple(dict.fromkeys(w for m in members for w in m.writes))
        p = graph.params
        dtype = next((m.attr("draft_dtype") for m in members if m.attr("draft_dtype")), "int32")
        variant = VariantSpec.of(comp, _layout(p, dtype), p.get("num_splits", 8))
        key = variant.key
        fused = Op(graph.fresh_name(comp), OpKind.DEVICE_KERNEL, streams[0], reads, writes,
                   _compose(members, reads, writes), None,
                   {"family": comp, "key": key, "variant": variant, "width": p["width"], "block_table_width": p["block_table_width"],
                    "block_size": p["block_size"], "draft_dtype": dtype,
                    "members": tuple(n for m in members for n in m.attr("members", (m.name,)))})
        ops = [o for o in graph.ops if o.name not in names]
        anchor = sum(1 for o in graph.ops[:pos] if o.name not in names)
        ops.insert(anchor, fused)
        return graph.with_ops(ops)
