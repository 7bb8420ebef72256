"""The schedule-aware interpreter: every order the hardware allows, and what a missing order changes."""

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specgen.passes import BoundaryGraphError, build_boundary, run_pipeline
from specgen.passes.ir import BoundaryGraph, Op, OpKind, Placement, Value
from specgen.passes.ir.interpreter import interpret, random_inputs
from specgen.passes.ir.schedule import check_schedule, differences, host_first, random_choice, run_schedule, search

BOUNDARIES = ["draft-to-verify", "verify-to-draft", "context-kv"]


def _two_streams(wait=True):
    """a writes x on stream s1; b reads x on stream s2 (after an event when ``wait``)."""
    values = {
        "x0": Value("x0", Placement.DEVICE, (2,), is_input=True, init="rand"),
        "x": Value("x", Placement.DEVICE, (2,)),
        "y": Value("y", Placement.DEVICE, (2,)),
        "ev": Value("ev", Placement.EVENT),
    }
    ops = [
        Op("a", OpKind.DEVICE_KERNEL, "s1", ("x0",), ("x",), lambda t: (t + 1,)),
        Op("rec", OpKind.EVENT_RECORD, "s1", (), ("ev",)),
        Op("w", OpKind.EVENT_WAIT, "s2", ("ev",)),
        Op("b", OpKind.DEVICE_KERNEL, "s2", ("x",), ("y",), lambda t: (t * 2,)),
    ]
    if not wait:
        ops = [o for o in ops if o.name != "w"]
    return BoundaryGraph("two", tuple(ops), values, "a", "b", ("y",))


def test_every_schedule_of_an_ordered_pair_agrees():
    g = _two_streams()
    inputs = random_inputs(g, seed=3)
    want = interpret(g, inputs)["y"]
    for k in range(30):
        run = run_schedule(g, inputs, random_choice(random.Random(k)))
        assert torch.equal(run.env["y"], want)
        assert run.trace.index("a") < run.trace.index("b")
        assert run.writer["y"] == "b"


def test_a_missing_wait_shows_in_some_schedule():
    g, broken = _two_streams(), _two_streams(wait=False)
    found = search(g, broken)
    assert found is not None and found[1] == ["y"]
    with pytest.raises(BoundaryGraphError, match=r"output 'y' differs .* op 'b' wrote it"):
        check_schedule(g, broken, random_choice(random.Random(found[0])))


def test_a_choice_out_of_range_is_refused():
    g = _two_streams()
    with pytest.raises(ValueError, match="returned 5"):
        run_schedule(g, random_inputs(g), lambda n: 5)


@pytest.mark.parametrize("name", BOUNDARIES)
@settings(max_examples=15, deadline=None)
@given(batch=st.integers(1, 3), rng=st.randoms(use_true_random=False))
def test_boundaries_before_and_after_agree_in_every_schedule(name, batch, rng):
    before = build_boundary(name, width=3, batch=batch, block_size=16, block_table_width=4)
    after, _ = run_pipeline(before)
    assert differences(before, before, random_choice(rng), seed=batch) == []
    assert differences(before, after, random_choice(rng), seed=batch) == []
    assert differences(before, after, host_first, seed=batch) == []
