"""Building a boundary's "before" graph: values, ops and the host chains an engine runs today.

``GraphBuilder`` collects a boundary's values and ops in program order (``passes/boundaries.py``
and ``passes/acceptance.py`` use it); ``boundary_params`` checks a layout and names the graph's
parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..specializations.families import DEFAULT_NUM_SPLITS, MAX_WIDTH, MIN_WIDTH
from .ir import HOST, BoundaryGraph, BoundaryGraphError, Op, OpKind, Placement, Value

K, P = OpKind, Placement
MAX_BATCH = 4096


@dataclass
class GraphBuilder:
    name: str
    params: dict[str, Any]
    ops: list[Op] = field(default_factory=list)
    values: dict[str, Value] = field(default_factory=dict)

    def val(self, name, placement, shape, dtype="int32", persistent=False, init=None):
        self.values[name] = Value(
            name, placement, tuple(shape), dtype, persistent, is_input=init is not None, init=init or "zeros"
        )
        return name

    def op(self, name, kind, stream, reads=(), writes=(), fn: Callable | None = None, cost=None, **attrs):
        self.ops.append(Op(name, kind, stream, tuple(reads), tuple(writes), fn, cost, attrs))

    def host_input_with_copy(self, host, dev, shape, init, stream, dtype="int32"):
        """A scheduler-side host value and the H2D that refreshes its stable device copy."""
        if host not in self.values:
            self.val(host, P.HOST, shape, dtype, init=init)
        self.val(dev, P.DEVICE, shape, dtype, persistent=True)
        self.op(f"h2d_{dev}", K.H2D, stream, [host], [dev])

    def host_chain(self, name, family, fn, reads, outs, stream, shapes):
        """host compute -> pinned staging -> H2D into the persistent device buffer."""
        hosts = [self.val(f"{o}_host", P.PINNED, shapes[o]) for o in outs]
        for o in outs:
            self.val(o, P.DEVICE, shapes[o], persistent=True)
        self.op(f"host_{name}", K.HOST_COMPUTE, HOST, reads, hosts, fn, family=family)
        for o, h in zip(outs, hosts):
            self.op(f"h2d_{o}", K.H2D, stream, [h], [o])

    def build(self, start, end, outputs, token_sources) -> BoundaryGraph:
        return BoundaryGraph(
            self.name,
            tuple(self.ops),
            dict(self.values),
            start,
            end,
            tuple(outputs),
            dict(self.params),
            tuple(token_sources),
        )


def check_params(width: int, batch: int, block_size: int, block_table_width: int) -> None:
    if not MIN_WIDTH <= width <= MAX_WIDTH:
        raise BoundaryGraphError(f"width {width} is outside {MIN_WIDTH}..{MAX_WIDTH}")
    if not 1 <= batch <= MAX_BATCH:
        raise BoundaryGraphError(f"batch {batch} is outside 1..{MAX_BATCH}")
    if block_size < 1 or block_table_width < 1:
        raise BoundaryGraphError("block size and block-table width must be positive")
    if width > block_size * block_table_width:
        raise BoundaryGraphError(f"width {width} exceeds the cache capacity of one sequence")


def boundary_params(width, batch, block_size, block_table_width, draft_dtype="int32"):
    check_params(width, batch, block_size, block_table_width)
    return dict(
        width=width,
        batch=batch,
        block_size=block_size,
        block_table_width=block_table_width,
        draft_dtype=draft_dtype,
        num_splits=DEFAULT_NUM_SPLITS,
        graph_stream="target",
        prepare_stream="prepare",
    )
