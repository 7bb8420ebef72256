"""fuse-chain: family kernels that form a composite family become one launch.

    before:  spec_verify_token_update{w4}; spec_verify_metadata_update{w4_bt64_bs128};
             spec_verify_attention_tiling_update{w4_bs128}                      (3 launches)
    after:   spec_verify_head_update{w4_bt64_bs128}                             (1 launch)

A composite (``specializations.families.COMPOSITES``, tried in order)
applies when every member is present once as a fused op (the output of ``fuse``, carrying a ``variant``),
all on one stream, a member reads another's output only where the composite passes it
within a thread (``carried_values``: the tails' accepted count, from the verification
to the next draft's inputs), and no op between them depends on them both ways.

    before:  greedy_prefix_verify{w4}; prepare_next_draft{w4_bt64_bs128}      (2 launches)
    after:   spec_verify_tail_update{w4_bt64_bs128}                          (1 launch)

The semantics are the members' composition.  Refusals are noted with their
reason, like ``fuse``'s; a composite is not tried where the members the
boundary has are covered by another composite (the hybrid head on a target
without linear state, the context tail where the next-draft tail applies).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..specializations.families import COMPOSITES, carried_values
from .base import PassContext, no_worse
from .fuse import WhyNoFuse, one_stream, replace_with_fused
from .ir import BoundaryGraph, Op, OpKind, variant_of
from .ir.ordering import order_with_events


@dataclass(frozen=True)
class FuseChain:
    name: ClassVar[str] = "fuse-chain"

    def apply(self, ctx: PassContext, graph: BoundaryGraph) -> BoundaryGraph:
        families = {o.attr("family") for o in graph.ops}
        for comp, member_fams in COMPOSITES.items():
            found = [
                [
                    o
                    for o in graph.ops
                    if o.kind is OpKind.DEVICE_KERNEL and variant_of(o) is not None and o.attr("family") == fam
                ]
                for fam in member_fams
            ]
            if not any(found):
                continue
            # a composite missing members whose present ones another composite covers is that one's business
            # (the hybrid head on a target without linear state, the context tail beside the next-draft tail):
            # no refusal of its own
            present, mine = {f for f in member_fams if f in families}, set(member_fams)
            if present != mine and any(
                other != member_fams and present <= set(other) and (set(other) < mine or set(other) <= families)
                for other in COMPOSITES.values()
            ):
                continue
            try:
                if any(len(f) != 1 for f in found):
                    missing = [fam for fam, f in zip(member_fams, found) if len(f) != 1]
                    raise WhyNoFuse(comp, "members %s are not each one fused op", ", ".join(missing))
                fused = order_with_events(self._chain(graph, comp, [f[0] for f in found]))
                if no_worse(None, self.name, graph, fused, model=ctx.model) is graph:
                    raise WhyNoFuse(comp, "the composite would lengthen the bubble")
                graph = fused
            except WhyNoFuse as why:
                ctx.note(self.name, str(why))
        return graph

    @staticmethod
    def _chain(graph: BoundaryGraph, comp: str, members: list[Op]) -> BoundaryGraph:
        stream = one_stream(comp, members)
        # a member may read an earlier member's output only where the composite passes it within a thread
        carried = carried_values(comp)
        at = [graph.index(m.name) for m in members]
        if carried and at != sorted(at):  # a carried value flows in member order only
            raise WhyNoFuse(comp, "the members run out of the composite's order")
        writer = {w: i for i, m in enumerate(members) for w in m.writes}
        for i, m in enumerate(members):
            for r in m.reads:
                if r in writer and (writer[r] >= i or r not in carried):
                    raise WhyNoFuse(comp, "a member reads another member's output (%s)", r)
        reads = tuple(dict.fromkeys(r for m in members for r in m.reads if r not in writer))
        writes = tuple(dict.fromkeys(w for m in members for w in m.writes))
        member_names = tuple(n for m in members for n in m.attr("members", (m.name,)))
        return replace_with_fused(graph, members, comp, stream, reads, writes, member_names)
