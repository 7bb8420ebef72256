"""hoist alone: the docstring's before/after as a golden text, plus the interpreter on both sides."""

from textwrap import dedent

from specgen.passes.hoist import Hoist
from specgen.passes.ir import HOST, BoundaryGraph, Op, OpKind, Placement, Value
from specgen.passes.ir import op_semantics as sem
from specgen.passes.ir.render import render_text

B, W = 2, 3
PARAMS = {"width": W, "batch": B, "block_size": 16, "block_table_width": 4, "prepare_stream": "prepare"}
HEADER = [
    "boundary hoist  start=final_draft end=target_replay",
    "params width=3 batch=2 block_size=16 block_table_width=4 prepare_stream=prepare",
]


def _val(name, placement, shape, persistent=False, init=None):
    return Value(name, placement, shape, "int32", persistent, is_input=init is not None, init=init or "zeros")


def _lines(text):
    return HEADER + dedent(text).splitlines()


def _graph():
    """final_draft; d2h; sync; host_stack; h2d_tokens; h2d_seq_lens; update_graph_task; replay."""
    values = [
        _val("draft_hidden", Placement.DEVICE, (B,), True, "token"),
        _val("draft_tokens", Placement.DEVICE, (B, W - 1), True, "token"),
        _val("last_tokens_host", Placement.PINNED, (B,), init="token"),
        _val("draft_tokens_host", Placement.PINNED, (B, W - 1)),
        _val("tokens_host", Placement.PINNED, (B * W,)),
        _val("tokens", Placement.DEVICE, (B * W,), True),
        _val("seq_lens_sched", Placement.HOST, (B,), init="seq_len"),
        _val("seq_lens", Placement.DEVICE, (B,), True),
        _val("graph_task_params", Placement.PINNED, (B,), True),
        _val("target_tokens", Placement.DEVICE, (B, W), True),
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
        Op("d2h_draft_tokens", OpKind.D2H, "draft", ("draft_tokens",), ("draft_tokens_host",)),
        Op("sync_final_draft", OpKind.HOST_SYNC, HOST, ("draft_tokens_host",)),
        Op(
            "host_stack_tokens",
            OpKind.HOST_COMPUTE,
            HOST,
            ("last_tokens_host", "draft_tokens_host"),
            ("tokens_host",),
            sem.stack_tokens,
        ),
        Op("h2d_tokens", OpKind.H2D, "target", ("tokens_host",), ("tokens",)),
        Op("h2d_seq_lens", OpKind.H2D, "target", ("seq_lens_sched",), ("seq_lens",)),
        Op(
            "update_graph_task",
            OpKind.GRAPH_TASK_UPDATE,
            HOST,
            ("seq_lens_sched",),
            ("graph_task_params",),
            sem.graph_task_params,
        ),
        Op(
            "target_replay",
            OpKind.GRAPH_REPLAY,
            "target",
            ("tokens", "seq_lens", "graph_task_params"),
            ("target_tokens",),
            lambda *xs: sem.mix(*xs, rows=B, cols=W),
            2000.0,
            {"graph_ops": ("target_forward",)},
        ),
    ]
    return BoundaryGraph(
        "hoist",
        tuple(ops),
        {v.name: v for v in values},
        "final_draft",
        "target_replay",
        ("tokens", "seq_lens", "graph_task_params", "target_tokens"),
        PARAMS,
        ("draft_tokens",),
    )


def test_golden_token_independent_work_moves_ahead(apply_alone):
    before = _graph()
    assert render_text(before).splitlines() == _lines("""\
        stream draft:
            0 final_draft: device_kernel reads(draft_tokens, draft_hidden) writes(draft_tokens)
            1 d2h_draft_tokens: d2h reads(draft_tokens) writes(draft_tokens_host)
        stream host:
            2 sync_final_draft: host_sync reads(draft_tokens_host) writes()
            3 host_stack_tokens: host_compute reads(last_tokens_host, draft_tokens_host) writes(tokens_host)
            6 update_graph_task: graph_task_update reads(seq_lens_sched) writes(graph_task_params)
        stream target:
            4 h2d_tokens: h2d reads(tokens_host) writes(tokens)
            5 h2d_seq_lens: h2d reads(seq_lens_sched) writes(seq_lens)
            7 target_replay: graph_replay [target_forward] reads(tokens, seq_lens, graph_task_params) writes(target_tokens)
        """)
    after, ctx = apply_alone(Hoist(), before)
    # the copy moves to the prepare stream and an event orders it before the replay;
    # the sync, the token-dependent host work and its copy stay where they were
    assert render_text(after).splitlines() == _lines("""\
        stream draft:
            0 final_draft: device_kernel reads(draft_tokens, draft_hidden) writes(draft_tokens)
            4 d2h_draft_tokens: d2h reads(draft_tokens) writes(draft_tokens_host)
        stream prepare:
            1 h2d_seq_lens: h2d reads(seq_lens_sched) writes(seq_lens)
            2 record_ev_h2d_seq_lens: event_record reads() writes(ev_h2d_seq_lens)
        stream host:
            3 update_graph_task: graph_task_update reads(seq_lens_sched) writes(graph_task_params)
            5 sync_final_draft: host_sync reads(draft_tokens_host) writes()
            6 host_stack_tokens: host_compute reads(last_tokens_host, draft_tokens_host) writes(tokens_host)
        stream target:
            7 h2d_tokens: h2d reads(tokens_host) writes(tokens)
            8 wait_ev_h2d_seq_lens_target: event_wait reads(ev_h2d_seq_lens) writes()
            9 target_replay: graph_replay [target_forward] reads(tokens, seq_lens, graph_task_params) writes(target_tokens)
        """)
    assert ctx.notes == ["hoist: moved 2 op(s) ahead of 'final_draft's completion: h2d_seq_lens, update_graph_task"]


def test_hoisted_graph_is_a_fixed_point(apply_alone):
    once, _ = apply_alone(Hoist(), _graph())
    twice, ctx = apply_alone(Hoist(), once)
    assert twice is once and ctx.notes == []
