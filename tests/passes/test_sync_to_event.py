"""sync-to-event alone: the docstring's before/after as a golden text, plus the interpreter on both sides."""

import dataclasses
from textwrap import dedent

from specgen.passes.ir import HOST, BoundaryGraph, Op, OpKind, Placement, Value
from specgen.passes.ir import op_semantics as sem
from specgen.passes.ir.render import render_text
from specgen.passes.sync_to_event import SyncToEvent

B, W = 2, 3
PARAMS = {"width": W, "batch": B, "block_size": 16, "block_table_width": 4}


def _val(name, placement, shape, persistent=False, init=None):
    return Value(name, placement, shape, "int32", persistent, is_input=init is not None, init=init or "zeros")


def _graph(host_consumer=False):
    """final_draft; d2h_draft_tokens; sync_final_draft; host_stack_tokens; h2d_tokens; target_replay."""
    values = [
        _val("draft_hidden", Placement.DEVICE, (B,), True, "token"),
        _val("last_tokens", Placement.DEVICE, (B,), True, "token"),
        _val("draft_tokens", Placement.DEVICE, (B, W - 1), True, "token"),
        _val("last_tokens_host", Placement.PINNED, (B,)),
        _val("draft_tokens_host", Placement.PINNED, (B, W - 1)),
        _val("tokens_host", Placement.PINNED, (B * W,)),
        _val("tokens", Placement.DEVICE, (B * W,), True),
        _val("target_tokens", Placement.DEVICE, (B, W), True),
        _val("committed", Placement.HOST, (B,)),
    ]
    ops = [
        Op(
            "final_draft",
            OpKind.DEVICE_KERNEL,
            "draft",
            ("draft_tokens", "draft_hidden"),
            ("draft_tokens",),
            sem.draft_step(W - 2),
            300.0,
        ),
        Op(
            "d2h_draft_tokens",
            OpKind.D2H,
            "draft",
            ("last_tokens", "draft_tokens"),
            ("last_tokens_host", "draft_tokens_host"),
        ),
        Op("sync_final_draft", OpKind.HOST_SYNC, HOST, ("last_tokens_host", "draft_tokens_host")),
        Op(
            "host_stack_tokens",
            OpKind.HOST_COMPUTE,
            HOST,
            ("last_tokens_host", "draft_tokens_host"),
            ("tokens_host",),
            sem.stack_tokens,
            attrs={"family": "spec_verify_token_update"},
        ),
        Op("h2d_tokens", OpKind.H2D, "target", ("tokens_host",), ("tokens",)),
        Op(
            "target_replay",
            OpKind.GRAPH_REPLAY,
            "target",
            ("tokens",),
            ("target_tokens",),
            lambda *xs: sem.mix(*xs, rows=B, cols=W),
            2000.0,
            {"graph_ops": ("target_forward",)},
        ),
    ]
    outputs = ("tokens", "target_tokens")
    if host_consumer:  # the scheduler reads the tokens on the host
        ops.append(
            Op("host_commit", OpKind.HOST_COMPUTE, HOST, ("last_tokens_host",), ("committed",), lambda t: (t.clone(),))
        )
        outputs += ("committed",)
    return BoundaryGraph(
        "tokens",
        tuple(ops),
        {v.name: v for v in values},
        "final_draft",
        "target_replay",
        outputs,
        PARAMS,
        ("draft_tokens",),
    )


HEADER = [
    "boundary tokens  start=final_draft end=target_replay",
    "params width=3 batch=2 block_size=16 block_table_width=4",
]


def _lines(text):
    return HEADER + dedent(text).splitlines()


def test_golden_host_round_trip_becomes_device_op(apply_alone):
    before = _graph()
    assert render_text(before).splitlines() == _lines("""\
        stream draft:
            0 final_draft: device_kernel reads(draft_tokens, draft_hidden) writes(draft_tokens)
            1 d2h_draft_tokens: d2h reads(last_tokens, draft_tokens) writes(last_tokens_host, draft_tokens_host)
        stream host:
            2 sync_final_draft: host_sync reads(last_tokens_host, draft_tokens_host) writes()
            3 host_stack_tokens: host_compute reads(last_tokens_host, draft_tokens_host) writes(tokens_host)
        stream target:
            4 h2d_tokens: h2d reads(tokens_host) writes(tokens)
            5 target_replay: graph_replay [target_forward] reads(tokens) writes(target_tokens)
        """)
    after, ctx = apply_alone(SyncToEvent(), before)
    assert render_text(after).splitlines() == _lines("""\
        stream draft:
            0 final_draft: device_kernel reads(draft_tokens, draft_hidden) writes(draft_tokens)
            1 record_ev_final_draft: event_record reads() writes(ev_final_draft)
        stream target:
            2 wait_ev_final_draft_target: event_wait reads(ev_final_draft) writes()
            3 dev_stack_tokens: device_kernel reads(last_tokens, draft_tokens) writes(tokens)
            4 target_replay: graph_replay [target_forward] reads(tokens) writes(target_tokens)
        """)
    assert ctx.notes == [
        "sync-to-event: 1 host op(s) now run on the device (target): host_stack_tokens; 1 H2D copies removed"
    ]
    assert after.op("dev_stack_tokens").attr("converted_from") == "host_stack_tokens"


def test_golden_sync_with_host_consumer_is_deferred(apply_alone):
    after, ctx = apply_alone(SyncToEvent(), _graph(host_consumer=True))
    # the copy stays for the host, but the host waits for it only after issuing the replay
    assert render_text(after).splitlines() == _lines("""\
        stream draft:
            0 final_draft: device_kernel reads(draft_tokens, draft_hidden) writes(draft_tokens)
            1 record_ev_final_draft: event_record reads() writes(ev_final_draft)
            4 d2h_draft_tokens: d2h reads(last_tokens, draft_tokens) writes(last_tokens_host, draft_tokens_host)
        stream target:
            2 wait_ev_final_draft_target: event_wait reads(ev_final_draft) writes()
            3 dev_stack_tokens: device_kernel reads(last_tokens, draft_tokens) writes(tokens)
            5 target_replay: graph_replay [target_forward] reads(tokens) writes(target_tokens)
        stream host:
            6 sync_final_draft: host_sync reads(last_tokens_host, draft_tokens_host) writes()
            7 host_commit: host_compute reads(last_tokens_host) writes(committed)
        """)
    assert ctx.notes[-1] == (
        "sync-to-event: deferred 'sync_final_draft' and its host-only consumers past 'target_replay'"
    )


def test_nothing_to_convert_is_the_same_graph(apply_alone):
    g = _graph()
    g = dataclasses.replace(g, start="h2d_tokens")  # the round trip now lies before the boundary
    after, _ = apply_alone(SyncToEvent(), g)
    assert after.ops == g.ops
