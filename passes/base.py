"""What every pass shares: the context it runs in and the pass protocol."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from .ir import BoundaryGraph


@dataclass
class PassContext:
    """Notes passes leave for people: refused fusions, ops kept out of the graph."""

    notes: list[str] = field(default_factory=list)

    def note(self, pass_name: str, message: str) -> None:
        self.notes.append(f"{pass_name}: {message}")


class Pass(Protocol):
    name: ClassVar[str]

    def apply(self, ctx: PassContext, graph: BoundaryGraph) -> BoundaryGraph: ...


def no_worse(ctx: PassContext, pass_name: str, before: BoundaryGraph, after: BoundaryGraph) -> BoundaryGraph:
    """The cost-model guard every pass ends with: a rewrite that lengthens the bubble is dropped."""
    from .cost import bubble_us

    if after is before:
        return before
    b0, b1 = bubble_us(before), bubble_us(after)
    if b1 > b0 + 1e-9:
        ctx.note(pass_name, f"rewrite dropped: it would lengthen the bubble from {b0:.1f} to {b1:.1f} us")
        return before
    return after
