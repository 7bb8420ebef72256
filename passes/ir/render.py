"""Views of a boundary graph: per-stream text, mermaid swimlanes, JSON metrics."""

from __future__ import annotations

from typing import Any, Mapping

from ...specializations.variants import VariantSpec
from .analysis import Ordering, between
from .core import HOST, BoundaryGraph, OpKind, variant_of
from .cost import CostModel, bubble_us, simulate


def summary(graph: BoundaryGraph, model: CostModel | None = None) -> dict[str, Any]:
    """The metrics ``specgen plan --format json`` reports for one graph."""
    sched = simulate(graph, model)
    crit = sched.critical_path(graph)
    kinds = {o.name: o.kind for o in graph.ops}
    in_bubble = between(graph, Ordering(graph))
    replay = next((o for o in graph.ops if o.kind is OpKind.GRAPH_REPLAY), None)
    variants = list(replay.attr("kernel_families", ())) if replay else []
    variants += [v for o in graph.ops if (v := variant_of(o)) is not None]
    return {
        "boundary": graph.name,
        "params": {k: v for k, v in graph.params.items()},
        "ops": len(graph.ops),
        "host_syncs_on_critical_path": sum(kinds[n] is OpKind.HOST_SYNC for n in crit),
        "h2d_copies_on_critical_path": sum(kinds[n] is OpKind.H2D for n in crit),
        "host_calls_after_final_draft": sum(kinds[n].is_host_call for n in in_bubble),
        "predicted_bubble_us": round(bubble_us(graph, model, sched), 3),
        "critical_path": crit,
        "graph_ops": list(replay.attr("graph_ops", (replay.name,))) if replay else [],
        "kernel_families": [_family_entry(v, graph.params) for v in variants],
    }


def _family_entry(variant: VariantSpec, params: Mapping[str, Any]) -> dict[str, Any]:
    """One ``kernel_families`` record: the variant's family and key, the boundary's full layout.

    The layout fields come from the graph's parameters, not from the variant,
    which keeps only what its key names.
    """
    return {
        "family": variant.family,
        "key": variant.key,
        "width": params["width"],
        "block_table_width": params["block_table_width"],
        "block_size": params["block_size"],
        "draft_dtype": params.get("draft_dtype", "int32"),
    }


def _describe(o) -> str:
    variant = variant_of(o)
    extra = f" [{variant.key}]" if variant is not None else ""
    if o.kind is OpKind.GRAPH_REPLAY:
        extra = " [" + ", ".join(o.attr("graph_ops", ())) + "]"
    return f"{o.name}: {o.kind.value}{extra} reads({', '.join(o.reads)}) writes({', '.join(o.writes)})"


def render_text(graph: BoundaryGraph) -> str:
    lines = [
        f"boundary {graph.name}  start={graph.start} end={graph.end}",
        "params " + " ".join(f"{k}={v}" for k, v in graph.params.items()),
    ]
    for stream in graph.streams():
        lines.append(f"stream {stream}:")
        for i, o in enumerate(graph.ops):
            if o.stream == stream:
                lines.append(f"  {i:3d} {_describe(o)}")
    return "\n".join(lines) + "\n"


_LANE = {HOST: "H", "draft": "D", "prepare": "P", "target": "T"}


def render_mermaid(graph: BoundaryGraph, title: str = "") -> str:
    """A sequence diagram with one participant per stream, as the pull requests of docs/references.md draw them."""
    lanes = {s: _LANE.get(s, s[:1].upper() + str(i)) for i, s in enumerate(graph.streams())}
    out = ["sequenceDiagram", "    autonumber"]
    if title:
        out.append(f"    title {title}")
    for s, a in lanes.items():
        out.append(f"    participant {a} as {s}")
    started = False
    for o in graph.ops:
        lane = lanes[o.stream]
        host = lanes.get(HOST, "H")
        variant = variant_of(o)
        label = variant.key if variant is not None else o.name
        if o.kind is OpKind.GRAPH_REPLAY:
            label = "replay graph: " + ", ".join(o.attr("graph_ops", ()))
        if o.kind.on_host:
            out.append(f"    {lane}->>{lane}: {label}")
        elif o.kind in (OpKind.EVENT_WAIT, OpKind.EVENT_RECORD):
            out.append(f"    {lane}-->>{lane}: {o.kind.value} {', '.join((*o.reads, *o.writes))}")
        else:
            out.append(f"    {host}->>{lane}: {label}")
        if o.name == graph.start and not started:
            out.append(f"    Note over {lane}: boundary starts after {o.name}")
            started = True
        if o.name == graph.end:
            out.append(f"    Note over {lane}: boundary ends at {o.name}")
    return "\n".join(out) + "\n"
