"""The boundary compiler: "before" graphs of the pipeline boundaries, the passes, the plans.

What the command line and the driver use::

    before = build_boundary("draft-to-verify", width=4, batch=8)
    after, ctx = run_pipeline(before)          # DEFAULT_PIPELINE, verified after every pass
    after, ctx = run_pipeline(before, model=CostModel.from_json("costs.json"))  # deciding with a calibration
    summary(before)["predicted_bubble_us"], summary(after)["predicted_bubble_us"]

Layout: ``ir/`` holds the IR and what reads it (analyses, ordering,
verifier, cost model, interpreter and its schedule-aware
variant, views); one file per pass, named after
it; ``manager`` holds the registry and the pass manager; ``plan`` turns the
pipeline's output into the ``Plan`` records codegen and the runtime use.
"""

from .base import PassContext
from .boundaries import build_boundary
from .ir import BoundaryGraphError
from .ir.cost import CostModel, bubble_us
from .ir.render import render_mermaid, render_text, summary
from .manager import DEFAULT_PIPELINE, PASSES, PassManager, PassPipelineError, parse_pipeline, run_pipeline
from .plan import plan_boundary, plan_variants

__all__ = [
    "DEFAULT_PIPELINE",
    "PASSES",
    "BoundaryGraphError",
    "CostModel",
    "PassContext",
    "PassManager",
    "PassPipelineError",
    "bubble_us",
    "build_boundary",
    "parse_pipeline",
    "plan_boundary",
    "plan_variants",
    "render_mermaid",
    "render_text",
    "run_pipeline",
    "summary",
]
