"""Every safety check against a hand-made wrong rewrite: the verifier, the schedules or the pass reject it,
naming the op."""

import dataclasses

import pytest

from specgen.passes import BoundaryGraphError, build_boundary, run_pipeline
from specgen.passes.boundaries import draft_to_verify
from specgen.passes.fuse import Fuse
from specgen.passes.hoist import Hoist
from specgen.passes.ir import HOST, BoundaryGraph, Op, OpKind, Placement, Value
from specgen.passes.ir import op_semantics as sem
from specgen.passes.ir.analysis import token_dependent
from specgen.passes.ir.ordering import order_with_events
from specgen.passes.ir.schedule import check_schedule, host_first, search
from specgen.passes.ir.verify import verify
from specgen.passes.sync_to_event import SyncToEvent

B, W = 2, 3
SHAPE = (B, 4)
PARAMS = {"width": W, "batch": B, "block_size": 16, "block_table_width": 4}
META = "spec_verify_metadata_update"


def mix(*xs):
    return sem.mix(*xs, rows=B, cols=4)


def _vals(*specs):
    """``name:placement[:persistent][:input]`` -> values of shape SHAPE."""
    out = {}
    for spec in specs:
        name, placement, *flags = spec.split(":")
        out[name] = Value(
            name,
            Placement(placement),
            SHAPE if placement != "event" else (),
            persistent="p" in flags,
            is_input="in" in flags,
            init="token" if "in" in flags else "zeros",
        )
    return out


def _graph(name, ops, values, outputs, tokens=("tok",)):
    return BoundaryGraph(name, tuple(ops), values, "final_draft", "replay", tuple(outputs), PARAMS, tokens)


def _move(graph, name, before):
    """``graph`` with op ``name`` issued just before op ``before``."""
    ops = [o for o in graph.ops if o.name != name]
    ops.insert(next(i for i, o in enumerate(ops) if o.name == before), graph.op(name))
    return graph.with_ops(ops)


# -- token-dependent hoist ----------------------------------------------------------------------
def test_token_dependent_work_hoisted_ahead_of_its_sync_is_rejected():
    before = draft_to_verify(width=W, batch=B, block_size=16, block_table_width=4)
    wrong = _move(before, "host_stack_tokens", "sync_final_draft")
    with pytest.raises(
        BoundaryGraphError,
        match=r"op 'host_stack_tokens'.*RAW race on '\w+_tokens_host' "
        r"with 'd2h_draft_tokens'",
    ):
        verify(wrong)
    assert search(before, wrong) is not None  # the host reads the tokens before the copy lands


def _zero_copy_token():
    """The final draft also writes its token to a pinned buffer; a copy of it feeds the replay."""
    values = _vals(
        "seed:device:p:in",
        "host_in:host:in",
        "tok:device:p",
        "tok_pinned:pinned:p",
        "prep:pinned",
        "d_prep:device:p",
        "d_tok:device:p",
        "out:device:p",
    )
    ops = [
        Op("final_draft", OpKind.DEVICE_KERNEL, "draft", ("seed",), ("tok", "tok_pinned"), lambda s: mix(s) * 2, 300.0),
        Op("h2d_tok", OpKind.H2D, "target", ("tok_pinned",), ("d_tok",)),
        Op("host_prep", OpKind.HOST_COMPUTE, HOST, ("host_in",), ("prep",), mix),
        Op("h2d_prep", OpKind.H2D, "target", ("prep",), ("d_prep",)),
        Op("replay", OpKind.GRAPH_REPLAY, "target", ("tok", "d_prep", "d_tok"), ("out",), mix, 2000.0),
    ]
    return order_with_events(_graph("zero-copy", ops, values, ("d_prep", "d_tok", "out"), ("tok", "tok_pinned")))


def test_hoist_moves_no_token_dependent_op(apply_alone):
    before = _zero_copy_token()
    after, ctx = apply_alone(Hoist(), before)
    assert "h2d_tok" in token_dependent(before)
    assert after.op("h2d_prep").stream == "prepare"  # token-independent: moved to the prepare stream
    assert after.op("h2d_tok").stream == "target" and "h2d_tok" not in ctx.notes[0]
    assert after.index("h2d_tok") > after.index("h2d_prep") and before.index("h2d_tok") < before.index("h2d_prep")


# -- dropped wait ---------------------------------------------------------------------------------
def test_a_dropped_wait_is_rejected():
    before = build_boundary("draft-to-verify", width=W, batch=B, block_size=16, block_table_width=4)
    after, _ = run_pipeline(before)
    wrong = after.with_ops([o for o in after.ops if o.name != "wait_ev_final_draft_target"])
    with pytest.raises(BoundaryGraphError, match=r"op 'target_replay'.*RAW race on 'draft_tokens' with 'final_draft'"):
        verify(wrong)
    assert search(before, wrong) is not None


# -- write-after-read ----------------------------------------------------------------------------
def _staging_rewrite():
    """The host fills a staging buffer, copies it, then refills it for a second copy (no sync between)."""
    values = _vals(
        "seed:device:p:in",
        "host_in:host:in",
        "tok:device:p",
        "stage:pinned",
        "d1:device:p",
        "d2:device:p",
        "out:device:p",
    )
    ops = [
        Op("final_draft", OpKind.DEVICE_KERNEL, "draft", ("seed",), ("tok",), mix, 300.0),
        Op("host_a", OpKind.HOST_COMPUTE, HOST, ("host_in",), ("stage",), mix),
        Op("h2d_a", OpKind.H2D, "target", ("stage",), ("d1",)),
        Op("host_b", OpKind.HOST_COMPUTE, HOST, ("stage",), ("stage",), lambda t: (t + 1,)),
        Op("h2d_b", OpKind.H2D, "target", ("stage",), ("d2",)),
        Op("replay", OpKind.GRAPH_REPLAY, "target", ("d1", "d2"), ("out",), mix, 2000.0),
    ]
    return _graph("staging", ops, values, ("d1", "d2", "out"))


def test_a_host_rewrite_racing_a_copy_is_a_war_race():
    wrong = _staging_rewrite()
    with pytest.raises(BoundaryGraphError, match=r"op 'host_b'.*WAR race on 'stage' with 'h2d_a'"):
        verify(wrong)
    found = search(wrong, wrong)  # the host refills the buffer before the first copy ran
    assert found is not None and found[1] == ["d1", "out"]


def test_ordering_repairs_a_war_race_with_an_event_after_the_copy():
    g = order_with_events(_staging_rewrite())
    verify(g)
    sync = g.ops[g.index("host_b") - 1]
    assert sync.kind is OpKind.HOST_SYNC and g.op(f"record_{sync.reads[0]}").stream == "target"
    assert g.index(f"record_{sync.reads[0]}") == g.index("h2d_a") + 1
    assert search(g, g) is None


# -- fuse across a host op -------------------------------------------------------------------------
def _fuse_around_host(both_ways):
    """m1 writes q; the host reads q (after a sync) and writes r; m2 (same family) reads r when ``both_ways``."""
    values = _vals(
        "seed:device:p:in", "host_in:host:in", "tok:device:p", "q:pinned:p", "r:pinned:p", "kv:device:p", "out:device:p"
    )
    fam = {"family": META}
    ops = [
        Op("final_draft", OpKind.DEVICE_KERNEL, "draft", ("seed",), ("tok",), mix, 300.0),
        Op("m1", OpKind.DEVICE_KERNEL, "target", ("seed",), ("q",), mix, attrs=fam),
        Op("sync_q", OpKind.HOST_SYNC, HOST, ("q",)),
        Op("h", OpKind.HOST_COMPUTE, HOST, ("q", "host_in"), ("r",), mix),
        Op("m2", OpKind.DEVICE_KERNEL, "target", ("r",) if both_ways else ("host_in_dev",), ("kv",), mix, attrs=fam),
        Op("replay", OpKind.GRAPH_REPLAY, "target", ("kv", "r"), ("out",), mix, 2000.0),
    ]
    if not both_ways:
        values.update(_vals("host_in_dev:device:p:in"))
    return _graph("fuse-host", ops, values, ("q", "r", "kv", "out"))


def test_a_fused_op_placed_after_a_host_op_that_reads_it_is_rejected():
    g = _fuse_around_host(both_ways=False)
    fused = Op(
        "fused", OpKind.DEVICE_KERNEL, "target", ("seed", "host_in_dev"), ("q", "kv"), lambda s, x: (*mix(s), *mix(x))
    )
    ops = [o for o in g.ops if o.name not in ("m1", "m2")]
    wrong = g.with_ops(ops[:3] + [fused] + ops[3:])  # after h, which reads q
    with pytest.raises(BoundaryGraphError, match=r"op 'sync_q'.*reads 'q', which nothing before it produces"):
        verify(wrong)


def test_fuse_places_the_fused_op_where_the_host_op_between_allows(apply_alone):
    after, ctx = apply_alone(Fuse(), _fuse_around_host(both_ways=False))
    assert ctx.notes == []
    assert after.index(META) < after.index("sync_q") < after.index("h")


def test_fuse_refuses_members_a_host_op_sits_between_both_ways(apply_alone):
    after, ctx = apply_alone(Fuse(), _fuse_around_host(both_ways=True))
    assert ctx.notes == [f"fuse: {META}: not fused: ops between the members depend on them both ways (sync_q, h)"]
    assert [o.name for o in after.ops] == [o.name for o in _fuse_around_host(both_ways=True).ops]


# -- unstable buffer in a capture ---------------------------------------------------------------
def test_a_captured_graph_on_a_buffer_without_a_stable_address_is_rejected():
    after, _ = run_pipeline(build_boundary("draft-to-verify", width=W, batch=B, block_size=16, block_table_width=4))
    values = dict(after.values, positions=dataclasses.replace(after.values["positions"], persistent=False))
    with pytest.raises(BoundaryGraphError, match=r"op 'target_replay'.*'positions' has no stable address"):
        verify(after.with_ops(after.ops, values))


# -- stale mirror ----------------------------------------------------------------------------------
def _rewritten_after_copy():
    """The host copy of the token is rewritten on the host before a host op uses it."""
    values = _vals(
        "seed:device:p:in",
        "host_in:host:in",
        "tok:device:p",
        "tok_host:pinned",
        "stage:pinned",
        "d:device:p",
        "out:device:p",
    )
    ops = [
        Op("final_draft", OpKind.DEVICE_KERNEL, "draft", ("seed",), ("tok",), mix, 300.0),
        Op("d2h_tok", OpKind.D2H, "draft", ("tok",), ("tok_host",)),
        Op("sync_tok", OpKind.HOST_SYNC, HOST, ("tok_host",)),
        Op("host_fix", OpKind.HOST_COMPUTE, HOST, ("tok_host", "host_in"), ("tok_host",), mix),
        Op("host_use", OpKind.HOST_COMPUTE, HOST, ("tok_host",), ("stage",), lambda t: (t * 3 + 1,)),
        Op("h2d_stage", OpKind.H2D, "target", ("stage",), ("d",)),
        Op("replay", OpKind.GRAPH_REPLAY, "target", ("d",), ("out",), mix, 2000.0),
    ]
    return _graph("stale", ops, values, ("d", "out"))


def test_a_device_op_reading_a_stale_mirror_is_rejected():
    before = _rewritten_after_copy()
    dev_use = Op("dev_use", OpKind.DEVICE_KERNEL, "target", ("tok",), ("d",), before.op("host_use").fn)
    ops = [o for o in before.ops if o.name not in ("host_use", "h2d_stage")]
    wrong = order_with_events(before.with_ops(ops[:-1] + [dev_use, ops[-1]]))
    verify(wrong)  # structurally sound: only the values show the stale read
    with pytest.raises(BoundaryGraphError, match=r"output 'd' differs .* op 'dev_use' wrote it"):
        check_schedule(before, wrong, host_first)


def test_sync_to_event_keeps_a_host_op_whose_input_is_rewritten_after_its_copy(apply_alone):
    after, ctx = apply_alone(SyncToEvent(), _rewritten_after_copy())
    assert after.op("host_use").kind is OpKind.HOST_COMPUTE
    assert (
        "sync-to-event: 'host_use' stays on the host: 'tok_host' is rewritten by 'host_fix' after its copy "
        "'d2h_tok', so the device side is no mirror of it"
    ) in ctx.notes
