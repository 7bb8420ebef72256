"""capture alone: the docstring's before/after as a golden text, the interpreter on both sides."""

from textwrap import dedent

from specgen.passes.capture import Capture
from specgen.passes.fuse import variant_at
from specgen.passes.ir import BoundaryGraph, Op, OpKind, Placement, Value
from specgen.passes.ir import op_semantics as sem
from specgen.passes.ir.render import render_text, summary
from specgen.specializations.plan import PlanStep

B, W, BS, BT = 2, 3, 16, 4
PARAMS = {"width": W, "batch": B, "block_size": BS, "block_table_width": BT}
HEADER = [
    "boundary capture  start=final_draft end=target_replay",
    "params width=3 batch=2 block_size=16 block_table_width=4",
]
TOKEN, META, TILING = "spec_verify_token_update", "spec_verify_metadata_update", "spec_verify_attention_tiling_update"


def _val(name, shape, persistent=True, init=None, placement=Placement.DEVICE):
    return Value(name, placement, shape, "int32", persistent, is_input=init is not None, init=init or "zeros")


def _lines(text):
    return HEADER + dedent(text).splitlines()


def _fused(family, reads, writes, fn):
    return Op(
        family,
        OpKind.DEVICE_KERNEL,
        "target",
        reads,
        writes,
        fn,
        None,
        {"family": family, "variant": variant_at(family, PARAMS)},
    )


def _graph(stable_input=True):
    """final_draft; record; wait; token_update; metadata_update; tiling_update; replay[target_forward]."""
    values = [
        _val("draft_hidden", (B,), init="token"),
        _val("draft_tokens", (B, W - 1), init="token"),
        _val("last_tokens", (B,), init="token"),
        _val("seq_lens", (B,), init="seq_len"),
        _val("seq_lens_tmp", (B,), persistent=False, init="seq_len"),
        _val("tokens", (B * W,)),
        _val("positions", (B * W,)),
        _val("row_kv_lens", (B * W,)),
        _val("target_tokens", (B, W)),
        _val("ev_draft", (), False, placement=Placement.EVENT),
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
        Op("record_draft", OpKind.EVENT_RECORD, "draft", (), ("ev_draft",)),
        Op("wait_draft", OpKind.EVENT_WAIT, "target", ("ev_draft",)),
        _fused(TOKEN, ("last_tokens", "draft_tokens"), ("tokens",), sem.stack_tokens),
        _fused(META, ("seq_lens",) if stable_input else ("seq_lens_tmp",), ("positions",), sem.positions(W)),
        _fused(TILING, ("seq_lens",), ("row_kv_lens",), lambda s: sem.tiling(W, BS, 8)(s)[:1]),
        Op(
            "target_replay",
            OpKind.GRAPH_REPLAY,
            "target",
            ("tokens", "positions", "row_kv_lens"),
            ("target_tokens",),
            lambda *xs: sem.mix(*xs, rows=B, cols=W),
            2000.0,
            {"graph_ops": ("target_forward",), "graph_steps": (PlanStep.forward(),)},
        ),
    ]
    return BoundaryGraph(
        "capture",
        tuple(ops),
        {v.name: v for v in values},
        "final_draft",
        "target_replay",
        ("tokens", "positions", "row_kv_lens", "target_tokens"),
        PARAMS,
        ("draft_tokens",),
    )


BEFORE = """\
    stream draft:
        0 final_draft: device_kernel reads(draft_tokens, draft_hidden) writes(draft_tokens)
        1 record_draft: event_record reads() writes(ev_draft)
    stream target:
        2 wait_draft: event_wait reads(ev_draft) writes()
        3 spec_verify_token_update: device_kernel [spec_verify_token_update__w3] reads(last_tokens, draft_tokens) writes(tokens)
        4 spec_verify_metadata_update: device_kernel [spec_verify_metadata_update__w3_bt4_bs16] reads(seq_lens) writes(positions)
        5 spec_verify_attention_tiling_update: device_kernel [spec_verify_attention_tiling_update__w3_bs16] reads(seq_lens) writes(row_kv_lens)
        6 target_replay: graph_replay [target_forward] reads(tokens, positions, row_kv_lens) writes(target_tokens)
    """


def test_golden_updates_join_the_graph_head(apply_alone):
    before = _graph()
    assert render_text(before).splitlines() == _lines(BEFORE)
    after, ctx = apply_alone(Capture(), before)
    assert render_text(after).splitlines() == _lines("""\
        stream draft:
            0 final_draft: device_kernel reads(draft_tokens, draft_hidden) writes(draft_tokens)
            1 record_draft: event_record reads() writes(ev_draft)
        stream target:
            2 wait_draft: event_wait reads(ev_draft) writes()
            3 target_replay: graph_replay [spec_verify_token_update__w3, spec_verify_metadata_update__w3_bt4_bs16, spec_verify_attention_tiling_update__w3_bs16, target_forward] reads(last_tokens, draft_tokens, seq_lens) writes(tokens, positions, row_kv_lens, target_tokens)
        """)
    assert ctx.notes == []
    replay = after.op("target_replay")
    variants = [variant_at(f, PARAMS) for f in (TOKEN, META, TILING)]
    assert replay.attr("kernel_families") == tuple(variants)
    assert replay.attr("graph_steps") == (*map(PlanStep.kernel, variants), PlanStep.forward())
    assert replay.attr("captured_kernels") == 3 and replay.attr("head_ops") == 3
    # the summary spells each captured variant with the boundary's full layout
    assert summary(after)["kernel_families"][1] == {
        "family": META,
        "key": "spec_verify_metadata_update__w3_bt4_bs16",
        "width": W,
        "block_table_width": BT,
        "block_size": BS,
        "draft_dtype": "int32",
    }


def test_golden_walk_stops_at_an_unstable_buffer(apply_alone):
    before = _graph(stable_input=False)
    after, ctx = apply_alone(Capture(), before)
    assert render_text(after).splitlines() == _lines("""\
        stream draft:
            0 final_draft: device_kernel reads(draft_tokens, draft_hidden) writes(draft_tokens)
            1 record_draft: event_record reads() writes(ev_draft)
        stream target:
            2 wait_draft: event_wait reads(ev_draft) writes()
            3 spec_verify_token_update: device_kernel [spec_verify_token_update__w3] reads(last_tokens, draft_tokens) writes(tokens)
            4 spec_verify_metadata_update: device_kernel [spec_verify_metadata_update__w3_bt4_bs16] reads(seq_lens_tmp) writes(positions)
            5 target_replay: graph_replay [spec_verify_attention_tiling_update__w3_bs16, target_forward] reads(seq_lens, tokens, positions) writes(row_kv_lens, target_tokens)
        """)
    assert ctx.notes == [
        "capture: 'spec_verify_metadata_update' stays outside the graph: 'seq_lens_tmp' has no stable address"
    ]
