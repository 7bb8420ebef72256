"""The boundary IR and what reads it: analyses, ordering, verifier, cost model, interpreters, views.

The IR core (ops over values, the boundary graph) lives in ``core``; its names
are re-exported here so that passes write ``from .ir import Op, OpKind``.
"""

from .core import HOST, BoundaryGraph, BoundaryGraphError, Op, OpKind, Placement, Value, variant_of

__all__ = ["HOST", "BoundaryGraph", "BoundaryGraphError", "Op", "OpKind", "Placement", "Value", "variant_of"]
