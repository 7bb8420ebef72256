"""``baseline``'s and ``compile``'s verify graphs in the serving loop: one per row count, all captured at set-up.

``baseline`` does not pad a step: a step of ``n`` rows runs in the step buffers of ``n`` rows
(``decode.step_bufs``) and replays the graph captured over them.  ``compile`` pads to the runtime's
bucket sizes (1, 2, 4, ..., ``max_batch``), as ``specgen`` and ``inductor`` do: the same padding, and
a handful of compiled shapes instead of ``max_batch``.  ``RowGraphs.capture`` builds the buffers and
the graph of every row count the mode runs before the run's clock starts, as
``specgen``'s buckets are (``ServingLoop._setup``), so no step of a timed run captures a graph or
compiles a function: the buffers hold padding rows then (every table entry the scratch block, no
linear-state slot), and the capture's warm-ups write only the scratch block.

``baseline`` on a GPU replays the target forward (and a sampling engine's vocabulary pass, into the row
count's ``probs``: ``sampling.forward_body``); on the CPU it runs the forward eagerly.  ``compile``
replays ``CompileMode.verify_body`` (head update, forward, tail), eager on the CPU.  The graphs share
one memory pool: they run one at a time and leave their results in the step buffers.
"""

from __future__ import annotations

import torch

from ...runtime.buffers import buckets_for
from ..graphs import CapturedGraph
from .decode import step_bufs
from .sampling import forward_body

__all__ = ["RowGraphs"]


class RowGraphs:
    """The verify graphs of ``loop`` (a ``ServingLoop`` in ``baseline`` or ``compile``) by row count."""

    def __init__(self, loop):
        self.loop = loop
        self.graphs: dict[int, object] = {}
        self.pool = torch.cuda.graph_pool_handle() if loop.device.type == "cuda" else None

    def capture(self) -> None:
        """Every row count's step buffers and graph (``baseline`` on the CPU has no graph: its forward runs
        eagerly); the engine's buffers, batch and state are left as they were."""
        loop = self.loop
        e = loop.engine
        if loop.mode == "baseline" and loop.device.type != "cuda":
            return
        bufs, batch = e.bufs, e.batch
        try:
            counts = buckets_for(loop.max_batch) if loop.mode == "compile" else range(1, loop.max_batch + 1)
            for rows in counts:
                e.bufs, _, e.batch = step_bufs(loop, rows)
                with e.state_kept():  # the warm-ups rewrite the buffers, the verify hidden states, a linear state
                    body = forward_body(loop, rows) if loop.mode == "baseline" else e.strategy.verify_body(e.bufs)
                    self.graphs[rows] = CapturedGraph(body, loop.device, self.pool)
        finally:
            e.bufs, e.batch = bufs, batch

    def forward(self, rows: int) -> None:
        """``baseline``'s verify forward over the step buffers of ``rows`` rows (its graph's replay on a GPU)."""
        self.graphs[rows]()

    def verify(self, rows: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``compile``'s verify over the step buffers of ``rows`` rows; the first ``n`` rows' (accepted,
        next_tokens) on the device, as ``CompileMode.verify`` reads them."""
        e = self.loop.engine
        self.graphs[rows]()
        return e.strategy.commit(e.bufs["next_tokens"][:n])
