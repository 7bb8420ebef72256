"""``compile``: the boundary updates as ``torch.compile``'d torch inside one captured verify graph."""

from __future__ import annotations

import time
from typing import Callable

from ..graphs import compiled_updates
from .base import Commit, Mode, register_mode

__all__ = ["CompileMode"]


@register_mode
class CompileMode(Mode):
    """The same update and acceptance code (the families' torch semantics) as ``torch.compile``'d
    functions, captured with the target forward in one CUDA graph; the acceptance is read back with
    a host synchronization each step, as gpt-fast does.  One host synchronization per step."""

    name = "compile"
    cpu_skip_reason = "needs CUDA (torch.compile'd updates inside CUDA graphs); skipped on the CPU"

    def updates(self) -> tuple[Callable, Callable]:
        """The draft-to-verify update and the draft's verify tail (sampled for a sampling engine), each
        ``fn(bufs, block_size)``."""
        e = self.engine
        backend = e.compile_backend
        return compiled_updates(backend)[0], e.proposer.compiled_tail(backend, sampled=e.sampling is not None)

    def verify_body(self, bufs: dict) -> Callable[[], None]:
        """The verify graph's body over the step buffers ``bufs`` (the engine's ``bufs`` while it is captured or
        run): the compiled head update, the target forward, a sampling engine's vocabulary pass, the compiled
        tail.  The engine captures it over its buffers; the serving loop over each row count's."""
        e = self.engine
        head, tail = self.updates()
        bs, linear = e.block_size, e.state is not None

        def verify():
            head(bufs, bs, linear)
            e.forward_only()
            if e.sampling is not None:  # the vocabulary pass, plain torch in the graph; then the compiled tail
                e.sampling.sampler(bufs)
            tail(bufs, bs)

        return verify

    def capture(self) -> None:
        self.verify_graph = self.engine.graph(self.verify_body(self.engine.bufs))

    def verify(self, lo: int, hi: int, mark: Callable[[], None]) -> Commit:
        self.verify_graph()
        mark()
        # one read-back that synchronizes, as gpt-fast's
        tokens = self.engine.bufs["next_tokens"].cpu()
        self.synced_ns = time.perf_counter_ns()
        return self.commit(tokens)

    @staticmethod
    def commit(next_tokens):
        """``(accepted, next_tokens)`` from the tail's ``next_tokens[B, W]``, which is -1 past the bonus."""
        return (next_tokens >= 0).sum(1) - 1, next_tokens

    def close(self) -> None:
        self.verify_graph = None
