"""What every pass shares: the context it runs in, the pass protocol and the one cost guard."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from .ir import BoundaryGraph
from .ir.cost import bubble_us

# Simulated times are sums of floats: a rewrite within this of the old bubble does not lengthen it.
TOLERANCE_US = 1e-9


@dataclass
class PassContext:
    """Notes passes leave for people: refused fusions, ops kept out of the graph."""

    notes: list[str] = field(default_factory=list)

    def note(self, pass_name: str, message: str) -> None:
        self.notes.append(f"{pass_name}: {message}")


class Pass(Protocol):
    name: ClassVar[str]

    def apply(self, ctx: PassContext, graph: BoundaryGraph) -> BoundaryGraph: ...


def lengthens_bubble(before: BoundaryGraph, after: BoundaryGraph) -> bool:
    """Whether ``after`` predicts a longer bubble than ``before`` (the one comparison every pass makes)."""
    return bubble_us(after) > bubble_us(before) + TOLERANCE_US


def no_worse(
    ctx: PassContext | None, pass_name: str, before: BoundaryGraph, after: BoundaryGraph, why: str | None = None
) -> BoundaryGraph:
    """The cost guard every pass applies: ``after``, unless it lengthens the bubble; then ``before``.

    A dropped rewrite is noted under ``pass_name`` with ``why`` when given,
    else with the two predicted bubbles.  ``ctx=None`` decides silently (for
    a pass that tries several candidates and notes the outcome itself).
    """
    if after is before or not lengthens_bubble(before, after):
        return after
    if ctx is not None:
        b0, b1 = bubble_us(before), bubble_us(after)
        ctx.note(pass_name, why or f"rewrite dropped: it would lengthen the bubble from {b0:.1f} to {b1:.1f} us")
    return before
