import dataclasses

import pytest

from specgen.passes.boundaries import draft_to_verify
from specgen.passes.ir import BoundaryGraphError, Op, OpKind, Placement, Value
from specgen.passes.ir.verify import verify


def _graph():
    return draft_to_verify(width=3, batch=2, block_size=16, block_table_width=4)


def _replace_op(g, name, **changes):
    return g.with_ops([o.with_(**changes) if o.name == name else o for o in g.ops])


def test_before_graphs_verify():
    verify(_graph())


def test_host_op_on_device_stream_is_rejected():
    g = _replace_op(_graph(), "host_positions", stream="target")
    with pytest.raises(BoundaryGraphError, match=r"op 'host_positions'.*must run on the 'host' stream.*neighbours"):
        verify(g)


def test_device_op_reading_host_only_buffer_is_rejected():
    g = _replace_op(_graph(), "final_draft", reads=("draft_tokens", "seq_lens_sched"))
    with pytest.raises(BoundaryGraphError, match="reads host buffer 'seq_lens_sched'"):
        verify(g)


def test_read_of_value_nothing_produces_is_rejected():
    g = _graph()
    values = dict(g.values, ghost=Value("ghost", Placement.DEVICE, (1,)))
    g = g.with_ops([o.with_(reads=(*o.reads, "ghost")) if o.name == "target_replay" else o for o in g.ops], values)
    with pytest.raises(BoundaryGraphError, match="reads 'ghost', which nothing before it produces"):
        verify(g)


def test_wait_before_its_record_is_rejected():
    g = _graph()
    values = dict(g.values, ev=Value("ev", Placement.EVENT))
    ops = list(g.ops)
    ops.insert(0, Op("early_wait", OpKind.EVENT_WAIT, "target", ("ev",)))
    ops.append(Op("late_record", OpKind.EVENT_RECORD, "draft", (), ("ev",)))
    with pytest.raises(BoundaryGraphError, match="early_wait"):
        verify(g.with_ops(ops, values))


def test_unordered_cross_stream_write_is_a_race():
    g = _graph()
    # the copy of the tokens now runs on the prepare stream, unordered with the replay on target
    g = _replace_op(g, "h2d_tokens", stream="prepare")
    with pytest.raises(BoundaryGraphError, match="RAW race on 'tokens'"):
        verify(g)


def test_duplicate_names_and_missing_endpoints():
    g = _graph()
    with pytest.raises(BoundaryGraphError, match="duplicate"):
        verify(g.with_ops([*g.ops, g.ops[0]]))
    with pytest.raises(BoundaryGraphError, match="endpoint"):
        verify(dataclasses.replace(g, end="nope"))


def test_copy_arity_rule():
    g = _replace_op(_graph(), "h2d_tokens", writes=())
    with pytest.raises(BoundaryGraphError, match="same number"):
        verify(g)
