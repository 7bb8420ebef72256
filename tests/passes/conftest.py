"""Fixtures for the pass tests: run one pass alone, verified and interpreted on both sides."""

import pytest

from specgen.passes.base import PassContext
from specgen.passes.ir.interpreter import outputs_equal
from specgen.passes.ir.verify import verify


@pytest.fixture
def apply_alone():
    """``apply_alone(pass_, graph) -> (after, ctx)``: one pass, the verifier on both graphs,
    and the interpreter's outputs of ``graph`` equal to those of ``after``."""

    def run(pass_, graph, seed=0):
        verify(graph)
        ctx = PassContext()
        after = pass_.apply(ctx, graph)
        verify(after)
        assert outputs_equal(graph, after, seed) == []
        return after, ctx

    return run
