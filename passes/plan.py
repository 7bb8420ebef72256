"""From the matrix to the variants a build must make: run the pipeline on every boundary x layout.

The fused ops of each resulting plan name the kernel families it launches;
a composite's members are wanted too, for engines that launch the steps one
by one, and so are the boundary's ``COMPANIONS`` (families an engine launches
between steps, such as the serving loop's row remap).  The output is typed:
``VariantSpec`` records and ``Plan`` records, which codegen builds and the
manifest carries to the runtime.
"""

from __future__ import annotations

from ..specializations.families import COMPANIONS, FAMILIES
from ..specializations.matrix import Matrix
from ..specializations.plan import BOUNDARY_NAMES, Plan
from ..specializations.variants import Layout, VariantSpec
from .boundaries import build_boundary
from .ir import OpKind
from .manager import run_pipeline


def plan_boundary(name: str, layout: Layout, pipeline: str | None = None) -> Plan:
    """The default pipeline's plan of ``name`` at ``layout`` (batch 1: plans do not depend on B)."""
    graph = build_boundary(
        name,
        width=layout.width,
        batch=1,
        block_size=layout.block_size,
        block_table_width=layout.block_table_width,
        draft_dtype=layout.draft_dtype,
    )
    after, _ = run_pipeline(graph) if pipeline is None else run_pipeline(graph, pipeline)
    replay = next((o for o in after.ops if o.kind is OpKind.GRAPH_REPLAY), None)
    steps = tuple(replay.attr("graph_steps", ())) if replay else ()
    return Plan(name, layout, steps)


def plan_variants(
    matrix: Matrix, boundaries=BOUNDARY_NAMES
) -> tuple[list[VariantSpec], dict[str, set[str]], list[Plan]]:
    """Every variant the plans of each boundary x ``matrix.layouts(boundary)`` launch.

    Returns the variants (sorted by key), the boundaries that need each key,
    and the plans themselves.
    """
    wanted: dict[str, VariantSpec] = {}
    needed_by: dict[str, set[str]] = {}
    plans = []
    for name in boundaries:
        for layout in matrix.layouts(name):
            plan = plan_boundary(name, layout)
            plans.append(plan)
            launched = [f for v in plan.kernels for f in (v.family, *FAMILIES[v.family].members)]
            for family in (*launched, *COMPANIONS.get(name, ())):  # and what engines launch beside the plan
                spec = VariantSpec.of(family, layout, matrix.num_splits)
                wanted.setdefault(spec.key, spec)
                needed_by.setdefault(spec.key, set()).add(name)
    specs = [wanted[k] for k in sorted(wanted)]
    return specs, needed_by, plans
