"""The "before" graphs: every boundary builds, verifies and runs in the interpreter; bad layouts are refused."""

import pytest

from specgen.passes import BoundaryGraphError, build_boundary
from specgen.passes.boundaries import BOUNDARIES
from specgen.passes.ir.interpreter import interpret, random_inputs
from specgen.passes.ir.verify import verify
from specgen.specializations.capabilities import SpeculativeVerifyCapabilities as Capabilities


@pytest.mark.parametrize("width", [2, 5, 16])
@pytest.mark.parametrize("name", sorted(BOUNDARIES))
def test_before_graphs_verify_and_run(name, width):
    g = build_boundary(name, width=width, batch=3, block_size=16, block_table_width=8)
    verify(g)
    env = interpret(g, random_inputs(g, seed=width))
    assert set(g.outputs) <= set(env)
    assert g.index(g.start) < g.index(g.end)


def test_capabilities_add_their_ops():
    plain = build_boundary("draft-to-verify", width=4)
    hybrid = build_boundary("draft-to-verify", width=4, caps=Capabilities(has_linear_state=True))
    assert "h2d_linear_state_indices" in [o.name for o in hybrid.ops]
    assert "h2d_linear_state_indices" not in [o.name for o in plain.ops]
    assert "linear_state_indices" in hybrid.op("target_replay").reads


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"name": "nope"}, "unknown boundary 'nope'"),
        ({"name": "context-kv", "width": 1}, "width 1 is outside"),
        ({"name": "context-kv", "batch": 0}, "batch 0 is outside"),
        ({"name": "context-kv", "block_size": 0}, "must be positive"),
        ({"name": "context-kv", "width": 9, "block_size": 2, "block_table_width": 4}, "exceeds the cache capacity"),
    ],
)
def test_bad_parameters_are_refused(kwargs, message):
    with pytest.raises(BoundaryGraphError, match=message):
        build_boundary(**kwargs)
