"""sync-to-event: host round trips become device ops ordered by events.

    before:  final_draft; d2h_draft_tokens; sync_final_draft; host_stack_tokens; h2d_tokens; replay
    after:   final_draft; record ev; [target] wait ev; dev_stack_tokens; replay

A host compute converts when every value it reads has a device mirror (the
other side of an H2D or D2H copy, or the output of another converted op) and
every value it writes feeds only H2D copies or other converted ops.  A host
value written again after its copy has no mirror; the op reading it stays on
the host, and a note says why.  The
converted ops run on the graph stream just before the first device op that
reads their results; the copies they replace disappear.  A sync that still
guards a host-only consumer (the scheduler reading accepted tokens) is
deferred past the boundary's end op, so the host learns the result one step
later instead of stalling the pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import PassContext, no_worse
from .ir import BoundaryGraph, Op, OpKind, Placement, Value
from .ir.analysis import sync_dependents
from .ir.ordering import order_with_events


def _mirrors(graph: BoundaryGraph) -> dict[str, tuple[str, str]]:
    """host value -> (device value, copy op), where neither side is written after the copy."""
    out = {}
    for i, o in enumerate(graph.ops):
        if o.kind in (OpKind.H2D, OpKind.D2H):
            later = {w for x in graph.ops[i + 1 :] for w in x.writes}
            for src, dst in zip(o.reads, o.writes):
                host, dev = (src, dst) if o.kind is OpKind.H2D else (dst, src)
                if host not in later and dev not in later:
                    out[host] = (dev, o.name)
    return out


def _stale_reads(graph: BoundaryGraph) -> list[tuple[str, str, str, str]]:
    """(host op, value, copy, rewriting op) for each host compute after the start that reads a copied
    host value whose sides are written again after the copy (the device side is not its mirror)."""
    mirrors, out = _mirrors(graph), []
    first = graph.index(graph.start) + 1
    for o in graph.ops[first:]:
        if o.kind is not OpKind.HOST_COMPUTE or o.fn is None:
            continue
        for r in o.reads:
            copies = [
                i for i, c in enumerate(graph.ops) if c.kind in (OpKind.H2D, OpKind.D2H) and r in (*c.reads, *c.writes)
            ]
            if r in mirrors or not copies:
                continue
            c = graph.ops[copies[-1]]
            sides = set(c.reads) | set(c.writes)
            writer = next((x.name for x in graph.ops[copies[-1] + 1 :] if sides & set(x.writes)), "?")
            out.append((o.name, r, c.name, writer))
    return out


@dataclass(frozen=True)
class SyncToEvent:
    name: ClassVar[str] = "sync-to-event"

    def apply(self, ctx: PassContext, graph: BoundaryGraph) -> BoundaryGraph:
        return no_worse(ctx, self.name, graph, self._rewrite(ctx, graph))

    def _rewrite(self, ctx: PassContext, graph: BoundaryGraph) -> BoundaryGraph:
        for op, value, copy, writer in _stale_reads(graph):
            ctx.note(
                self.name,
                f"'{op}' stays on the host: '{value}' is rewritten by '{writer}' after its copy "
                f"'{copy}', so the device side is no mirror of it",
            )
        excluded: set[str] = set()
        while converted := self._convertible(graph, excluded):
            result = self._convert(ctx, graph, converted)
            if isinstance(result, BoundaryGraph):
                graph, excluded = result, set()  # the rest may convert at a later point
                continue
            excluded.add(result)  # its device inputs are not ready where the chain must run
        graph = self._drop_or_defer_syncs(ctx, graph)
        return order_with_events(graph)

    # -- which host computes become device ops ----------------------------------------
    def _convertible(self, graph: BoundaryGraph, excluded: set[str]) -> list[Op]:
        mirrors = _mirrors(graph)
        first = graph.index(graph.start) + 1
        cand = {
            o.name: o
            for o in graph.ops[first:]
            if o.kind is OpKind.HOST_COMPUTE and o.fn is not None and o.name not in excluded
        }
        changed = True
        while changed:
            changed = False
            produced = {w: n for n, o in cand.items() for w in o.writes}
            for n, o in list(cand.items()):
                ok_in = all(r in mirrors or r in produced for r in o.reads)
                ok_out = all(
                    w not in graph.outputs
                    and graph.readers(w)
                    and graph.writers(w) == [n]
                    and all(graph.op(r).kind is OpKind.H2D or r in cand for r in graph.readers(w))
                    and sum(graph.op(r).kind is OpKind.H2D for r in graph.readers(w)) <= 1
                    for w in o.writes
                )
                if not (ok_in and ok_out):
                    del cand[n]
                    changed = True
        return [o for o in graph.ops if o.name in cand]

    def _convert(self, ctx: PassContext, graph: BoundaryGraph, chain: list[Op]) -> BoundaryGraph | str:
        """The converted graph, or the name of a host op whose inputs would not be ready."""
        mirrors = _mirrors(graph)
        values = dict(graph.values)
        names = {o.name for o in chain}
        rename: dict[str, str] = {}
        dropped: set[str] = set()
        for o in chain:
            for w in o.writes:
                copies = [graph.op(r) for r in graph.readers(w) if graph.op(r).kind is OpKind.H2D]
                if copies:
                    rename[w] = copies[0].writes[copies[0].reads.index(w)]
                    dropped.update(c.name for c in copies)
                else:  # an intermediate between converted ops: a device temporary
                    tmp = graph.fresh_name(w.removesuffix("_host") + "_dev")
                    values[tmp] = Value(tmp, Placement.DEVICE, values[w].shape, values[w].dtype)
                    rename[w] = tmp
        for r in {r for o in chain for r in o.reads} - set(rename):
            rename[r] = mirrors[r][0]
        stream = graph.params.get("graph_stream", "target")
        new_ops = [
            Op(
                graph.fresh_name("dev_" + o.name.removeprefix("host_")),
                OpKind.DEVICE_KERNEL,
                stream,
                tuple(rename[r] for r in o.reads),
                tuple(rename[w] for w in o.writes),
                o.fn,
                None,
                {**o.attrs, "converted_from": o.name},
            )
            for o in chain
        ]
        produced = {w for o in new_ops for w in o.writes}
        rest = [o for o in graph.ops if o.name not in names and o.name not in dropped]
        # As early as the inputs allow: where the data is ready, not where it used to be consumed.
        # device values read through a mirror (a chain's own results may share their names)
        needed = {rename[r] for o in chain for r in o.reads if r not in {w for c in chain for w in c.writes}}
        latest = max((i for i, o in enumerate(rest) if needed.intersection(o.writes)), default=-1)
        # before the first op that reads or rewrites what the chain now writes on the device
        first_use = next((i for i, o in enumerate(rest) if produced.intersection((*o.reads, *o.writes))), len(rest))
        if latest + 1 > first_use:  # an input arrives too late: the op that needs it stays on the host
            late = set(rest[latest].writes)
            return next(orig.name for orig, new in zip(chain, new_ops) if late.intersection(new.reads))
        at = latest + 1
        ready = {k for k, v in values.items() if v.is_input} | {w for o in rest[:at] for w in o.writes}
        for orig, new in zip(chain, new_ops):
            if not ready.issuperset(new.reads):
                return orig.name
            ready.update(new.writes)
        ctx.note(
            self.name,
            f"{len(chain)} host op(s) now run on the device ({stream}): "
            + ", ".join(o.name for o in chain)
            + f"; {len(dropped)} H2D copies removed",
        )
        ops = rest[:at] + new_ops + rest[at:]
        return self._drop_dead_d2h(graph.with_ops(ops, values))

    @staticmethod
    def _drop_dead_d2h(graph: BoundaryGraph) -> BoundaryGraph:
        keep = []
        for o in graph.ops:
            if o.kind is OpKind.D2H:
                users = [graph.op(r) for w in o.writes for r in graph.readers(w)]
                if all(u.kind is OpKind.HOST_SYNC for u in users) and not set(o.writes) & set(graph.outputs):
                    continue
            keep.append(o)
        keep = [
            o
            for o in keep
            if o.kind is not OpKind.HOST_SYNC
            or any(r in {w for k in keep for w in k.writes} or graph.values[r].is_input for r in o.reads)
        ]
        return graph.with_ops(keep)

    # -- syncs: gone when nothing on the host needs them, deferred when only the host does ------
    def _drop_or_defer_syncs(self, ctx: PassContext, graph: BoundaryGraph) -> BoundaryGraph:
        ops = list(graph.ops)
        end = graph.index(graph.end)
        first = graph.index(graph.start) + 1
        syncs = [o for o in ops[first:end] if o.kind is OpKind.HOST_SYNC]
        for s in syncs:
            idx = ops.index(s)
            # what races without the sync needs it: a host op that reads what it waits for or rewrites
            # what a copy still reads (WAR); a sync another one covers orders nothing
            racing = sync_dependents(graph.with_ops(ops))[s.name]
            if not racing:
                ops.remove(s)
                ctx.note(self.name, f"removed '{s.name}': nothing races without it")
                continue
            host_users = [o for o in ops[idx + 1 :] if o.kind.on_host and o.name in racing]
            if not host_users:
                ctx.note(self.name, f"kept '{s.name}': device work issued after it needs it")
                continue
            deferred = self._deferrable(graph.with_ops(ops), s, host_users)
            if deferred is None:
                ctx.note(self.name, f"kept '{s.name}': an op before '{graph.end}' needs its host results")
                continue
            ops = [o for o in ops if o.name not in deferred]
            at = next(i for i, o in enumerate(ops) if o.name == graph.end) + 1
            ops[at:at] = [o for o in graph.ops if o.name in deferred]
            ctx.note(self.name, f"deferred '{s.name}' and its host-only consumers past '{graph.end}'")
        return graph.with_ops(ops)

    @staticmethod
    def _deferrable(graph: BoundaryGraph, sync: Op, users: list[Op]) -> set[str] | None:
        deps = graph.dependency_graph()
        end = graph.index(graph.end)
        group = {sync.name} | {u.name for u in users if graph.index(u.name) < end}
        if graph.index(sync.name) > end:
            return None
        for n in list(group):
            for succ in deps.successors(n):
                if succ not in group and graph.index(succ) <= end:
                    return None
        return group
