"""capture's tail-gap rule, for every tail member: the graph stands after work a later member needs.

In the verify-to-draft boundary below two ops follow the verification's
replay on its stream, ``greedy`` and ``h2d_prep``, and the host issues
``host_prep`` between them.  Both join the graph.  When ``h2d_prep`` copies
what ``host_prep`` writes, the merged replay must be issued after
``host_prep`` (where its last member stood), although the first tail member
needs nothing from it; when no member needs it, the graph keeps the
replay's slot.
"""

from specgen.passes.capture import Capture
from specgen.passes.ir import HOST, BoundaryGraph, Op, OpKind, Placement, Value
from specgen.passes.ir import op_semantics as sem
from specgen.passes.ir.ordering import order_with_events

B, COLS = 2, 4
SHAPE = (B, COLS)


def _mix(*xs):
    return sem.mix(*xs, rows=B, cols=COLS)


def _val(name, placement=Placement.DEVICE, persistent=True, init=None):
    return Value(name, placement, SHAPE, "int32", persistent, is_input=init is not None, init=init or "zeros")


def _graph(copy_reads_the_gap: bool = True) -> BoundaryGraph:
    """verify_replay; greedy; host_prep (host); h2d_prep; next_draft (the draft stream).

    ``h2d_prep`` copies ``stage`` (what ``host_prep`` writes) or, with
    ``copy_reads_the_gap=False``, ``stage0`` (filled before the boundary).
    """
    values = [
        _val("tokens", init="token"),
        _val("host_in", Placement.HOST, persistent=False, init="token"),
        _val("stage0", Placement.PINNED, init="token"),
        _val("target_tokens"),
        _val("accepted"),
        _val("stage", Placement.PINNED),
        _val("prep"),
        _val("draft_out"),
    ]
    staged = "stage" if copy_reads_the_gap else "stage0"
    ops = [
        Op(
            "verify_replay",
            OpKind.GRAPH_REPLAY,
            "target",
            ("tokens",),
            ("target_tokens",),
            _mix,
            2000.0,
            {"graph_ops": ("target_forward",)},
        ),
        Op("greedy", OpKind.DEVICE_KERNEL, "target", ("target_tokens",), ("accepted",), _mix),
        Op("host_prep", OpKind.HOST_COMPUTE, HOST, ("host_in",), ("stage",), _mix),
        Op("h2d_prep", OpKind.H2D, "target", (staged,), ("prep",)),
        Op("next_draft", OpKind.DEVICE_KERNEL, "draft", ("accepted", "prep", "stage"), ("draft_out",), _mix, 300.0),
    ]
    g = BoundaryGraph(
        "capture_tail",
        tuple(ops),
        {v.name: v for v in values},
        "verify_replay",
        "next_draft",
        ("target_tokens", "accepted", "prep", "draft_out"),
        {"width": COLS, "block_table_width": 8, "block_size": 16, "batch": B},
        ("tokens",),
    )
    return order_with_events(g)


def test_a_later_tail_member_reading_work_issued_in_between_moves_the_graph_after_it(apply_alone):
    before = _graph()
    after, _ = apply_alone(Capture(), before)  # verified and interpreted on both sides
    assert after.op("verify_replay").attr("graph_ops") == ("target_forward", "greedy", "h2d_prep")
    order = [o.name for o in after.ops]
    assert "greedy" not in order and "h2d_prep" not in order
    assert order.index("host_prep") < order.index("verify_replay")


def test_a_tail_that_needs_nothing_in_between_keeps_the_replays_slot(apply_alone):
    after, _ = apply_alone(Capture(), _graph(copy_reads_the_gap=False))
    assert after.op("verify_replay").attr("graph_ops") == ("target_forward", "greedy", "h2d_prep")
    order = [o.name for o in after.ops]
    assert order.index("verify_replay") < order.index("host_prep")
