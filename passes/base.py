"""What every pass shares: the context it runs in, the pass protocol and the one cost guard."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from .ir import BoundaryGraph
from .ir.cost import CostModel, bubble_us

# Simulated times are sums of floats: a rewrite within this of the old bubble does not lengthen it.
TOLERANCE_US = 1e-9


@dataclass
class PassContext:
    """Notes passes leave for people (refused fusions, ops kept out of the graph), and the cost model every
    pass's guard decides with (``model``; None: the defaults; ``specgen plan --costs`` gives a calibration)."""

    notes: list[str] = field(default_factory=list)
    model: CostModel | None = None

    def note(self, pass_name: str, message: str) -> None:
        self.notes.append(f"{pass_name}: {message}")


class Pass(Protocol):
    name: ClassVar[str]

    def apply(self, ctx: PassContext, graph: BoundaryGraph) -> BoundaryGraph: ...


def lengthens_bubble(before: BoundaryGraph, after: BoundaryGraph, model: CostModel | None = None) -> bool:
    """Whether ``after`` predicts a longer bubble than ``before`` under ``model`` (the one comparison every
    pass makes)."""
    return bubble_us(after, model) > bubble_us(before, model) + TOLERANCE_US


def no_worse(
    ctx: PassContext | None,
    pass_name: str,
    before: BoundaryGraph,
    after: BoundaryGraph,
    why: str | None = None,
    model: CostModel | None = None,
) -> BoundaryGraph:
    """The cost guard every pass applies: ``after``, unless it lengthens the bubble; then ``before``.

    The bubbles are predicted with ``model``, else ``ctx.model``, else the
    default costs.  A dropped rewrite is noted under ``pass_name`` with ``why``
    when given, else with the two predicted bubbles.  ``ctx=None`` decides
    silently (for a pass that tries several candidates and notes the outcome
    itself; it passes its context's model).
    """
    model = model if model is not None else ctx.model if ctx is not None else None
    if after is before or not lengthens_bubble(before, after, model):
        return after
    if ctx is not None:
        b0, b1 = bubble_us(before, model), bubble_us(after, model)
        ctx.note(pass_name, why or f"rewrite dropped: it would lengthen the bubble from {b0:.1f} to {b1:.1f} us")
    return before
