"""``compile``: the boundary updates as ``torch.compile``'d torch inside one captured verify graph."""

from __future__ import annotations

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

    def capture(self) -> None:
        e = self.engine
        head, tail = self.updates()
        bufs, bs, linear = e.bufs, e.block_size, e.state is not None

        def verify():
            head(bufs, bs, linear)
            e.forward_only()
            if e.sampling is not None:  # the vocabulary pass, plain torch in the graph; then the compiled tail
                e.sampling.sampler(bufs)
            tail(bufs, bs)

        self.verify_graph = e.graph(verify)

    def verify(self, lo: int, hi: int, mark: Callable[[], None]) -> Commit:
        self.verify_graph()
        mark()
        # one read-back that synchronizes, as gpt-fast's; next_tokens is -1 past the bonus
        next_tokens = self.engine.bufs["next_tokens"].cpu()
        return (next_tokens >= 0).sum(1) - 1, next_tokens

    def close(self) -> None:
        self.verify_graph = None
