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
