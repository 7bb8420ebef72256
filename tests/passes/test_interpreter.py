"""The reference interpreter: the definition of what a graph computes, and its complaints."""

import pytest
import torch

from specgen.passes import BoundaryGraphError, build_boundary
from specgen.passes.ir import BoundaryGraph, Op, OpKind, Placement, Value
from specgen.passes.ir.interpreter import interpret, outputs_equal, random_inputs


def _graph(fn):
    values = {
        "x": Value("x", Placement.DEVICE, (2,), is_input=True, init="rand"),
        "y": Value("y", Placement.DEVICE, (2,)),
    }
    ops = (
        Op("k", OpKind.DEVICE_KERNEL, "s", ("x",), ("y",), fn),
        Op("end", OpKind.DEVICE_KERNEL, "s", ("y",), ("y",), lambda y: (y,)),
    )
    return BoundaryGraph("g", ops, values, "k", "end", ("y",))


def test_copies_and_semantics_run_in_program_order():
    g = _graph(lambda x: (x * 2,))
    inputs = random_inputs(g, seed=1)
    assert torch.equal(interpret(g, inputs)["y"], inputs["x"] * 2)
    assert outputs_equal(g, g) == []
    assert outputs_equal(g, _graph(lambda x: (x * 3,))) == ["y"]


def test_inputs_fit_the_layout():
    g = build_boundary("draft-to-verify", width=4, batch=3, block_size=16, block_table_width=8)
    inputs = random_inputs(g, seed=2)
    assert int(inputs["seq_lens_sched"].max()) <= 8 * 16 - 4
    assert inputs["block_table_sched"].shape == (3, 8)


@pytest.mark.parametrize(
    "fn, message",
    [
        (None, "has no reference semantics"),
        (lambda x: (x, x), "produced 2 values for 1 writes"),
        (lambda x: (x[:1],), r"wrote 'y' with shape \(1,\), declared \(2,\)"),
    ],
)
def test_malformed_semantics_are_named(fn, message):
    with pytest.raises(BoundaryGraphError, match=message):
        interpret(_graph(fn), random_inputs(_graph(fn)))


def _two_outputs(f1, f2):
    values = {
        "x": Value("x", Placement.DEVICE, (2,), is_input=True, init="rand"),
        "y1": Value("y1", Placement.DEVICE, (2,)),
        "y2": Value("y2", Placement.DEVICE, (2,)),
    }
    ops = (Op("k", OpKind.DEVICE_KERNEL, "s", ("x",), ("y1", "y2"), lambda x: (f1(x), f2(x))),)
    return BoundaryGraph("g", ops, values, "k", "k", ("y1", "y2"))


def test_every_output_is_compared():
    g = _two_outputs(lambda x: x + 1, lambda x: x + 2)
    assert outputs_equal(g, _two_outputs(lambda x: x + 9, lambda x: x + 2)) == ["y1"]
    assert outputs_equal(g, _two_outputs(lambda x: x + 1, lambda x: x + 9)) == ["y2"]
    assert outputs_equal(g, _two_outputs(lambda x: x, lambda x: x)) == ["y1", "y2"]
