"""The "before" graphs: every boundary builds, verifies and runs in the interpreter; bad layouts are refused."""

import pytest
import torch

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
    linear = {"host_linear_state", "h2d_state_read_slot", "h2d_state_write_slots", "h2d_accepted"}
    assert linear <= {o.name for o in hybrid.ops}
    assert not linear & {o.name for o in plain.ops}
    assert {"state_read_slot", "state_write_slots"} <= set(hybrid.op("target_replay").reads)
    assert hybrid.name == "draft-to-verify-linear"
    assert [o.name for o in build_boundary("draft-to-verify-linear", width=4).ops] == [o.name for o in hybrid.ops]


def test_linear_state_host_chain_is_the_family():
    """The hybrid's "before" path computes the slots the kernel family does, over any int32 inputs."""
    g = build_boundary("draft-to-verify-linear", width=5, batch=7, block_size=16, block_table_width=8)
    env = interpret(g, random_inputs(g, seed=3))
    acc, slots = env["accepted_sched"].long(), env["state_slots_sched"].long()
    clamp = acc.clamp(0, 4)
    committed = slots.gather(1, clamp[:, None])[:, 0]
    assert env["state_read_slot"].tolist() == torch.where(committed >= 0, committed, -1).tolist()
    assert env["state_write_slots"].tolist() == torch.where(slots >= 0, slots, -1).reshape(-1).tolist()
    assert (acc < 0).any() or (acc > 4).any()  # the draw reaches the clamped counts


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
