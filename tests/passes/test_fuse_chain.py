"""fuse-chain alone: the docstring's before/after as a golden text, the interpreter on both sides."""

from textwrap import dedent

from specgen.passes.base import PassContext
from specgen.passes.fuse import variant_at
from specgen.passes.fuse_chain import FuseChain
from specgen.passes.ir import BoundaryGraph, Op, OpKind, Placement, Value, variant_of
from specgen.passes.ir import op_semantics as sem
from specgen.passes.ir.render import render_text

B, W, BS, BT = 2, 3, 16, 4
PARAMS = {"width": W, "batch": B, "block_size": BS, "block_table_width": BT}
HEADER = [
    "boundary chain  start=final_draft end=target_replay",
    "params width=3 batch=2 block_size=16 block_table_width=4",
]
TOKEN, META, TILING = "spec_verify_token_update", "spec_verify_metadata_update", "spec_verify_attention_tiling_update"


def _val(name, shape, persistent=True, init=None, placement=Placement.DEVICE):
    return Value(name, placement, shape, "int32", persistent, is_input=init is not None, init=init or "zeros")


def _lines(text):
    return HEADER + dedent(text).splitlines()


def _fused(family, reads, writes, fn):
    """An op as ``fuse`` leaves it: a family tag and the variant it launches."""
    return Op(
        family,
        OpKind.DEVICE_KERNEL,
        "target",
        reads,
        writes,
        fn,
        None,
        {"family": family, "variant": variant_at(family, PARAMS), "members": (f"dev_{family}",)},
    )


def _graph(families=(TOKEN, META, TILING)):
    """final_draft; record; wait; token_update; metadata_update; tiling_update; target_replay."""
    values = [
        _val("draft_hidden", (B,), init="token"),
        _val("draft_tokens", (B, W - 1), init="token"),
        _val("last_tokens", (B,), init="token"),
        _val("seq_lens", (B,), init="seq_len"),
        _val("tokens", (B * W,)),
        _val("positions", (B * W,)),
        _val("row_kv_lens", (B * W,)),
        _val("target_tokens", (B, W)),
        _val("ev_draft", (), False, placement=Placement.EVENT),
    ]
    kernels = {
        TOKEN: _fused(TOKEN, ("last_tokens", "draft_tokens"), ("tokens",), sem.stack_tokens),
        META: _fused(META, ("seq_lens",), ("positions",), sem.positions(W)),
        TILING: _fused(TILING, ("seq_lens",), ("row_kv_lens",), lambda s: sem.tiling(W, BS, 8)(s)[:1]),
    }
    reads = tuple(kernels[f].writes[0] for f in families)
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
        *(kernels[f] for f in families),
        Op(
            "target_replay",
            OpKind.GRAPH_REPLAY,
            "target",
            reads,
            ("target_tokens",),
            lambda *xs: sem.mix(*xs, rows=B, cols=W),
            2000.0,
            {"graph_ops": ("target_forward",)},
        ),
    ]
    return BoundaryGraph(
        "chain",
        tuple(ops),
        {v.name: v for v in values},
        "final_draft",
        "target_replay",
        (*reads, "target_tokens"),
        PARAMS,
        ("draft_tokens",),
    )


def test_golden_composite_becomes_one_launch(apply_alone):
    before = _graph()
    assert render_text(before).splitlines() == _lines("""\
        stream draft:
            0 final_draft: device_kernel reads(draft_tokens, draft_hidden) writes(draft_tokens)
            1 record_draft: event_record reads() writes(ev_draft)
        stream target:
            2 wait_draft: event_wait reads(ev_draft) writes()
            3 spec_verify_token_update: device_kernel [spec_verify_token_update__w3] reads(last_tokens, draft_tokens) writes(tokens)
            4 spec_verify_metadata_update: device_kernel [spec_verify_metadata_update__w3_bt4_bs16] reads(seq_lens) writes(positions)
            5 spec_verify_attention_tiling_update: device_kernel [spec_verify_attention_tiling_update__w3_bs16] reads(seq_lens) writes(row_kv_lens)
            6 target_replay: graph_replay [target_forward] reads(tokens, positions, row_kv_lens) writes(target_tokens)
        """)
    after, ctx = apply_alone(FuseChain(), before)
    assert render_text(after).splitlines() == _lines("""\
        stream draft:
            0 final_draft: device_kernel reads(draft_tokens, draft_hidden) writes(draft_tokens)
            1 record_draft: event_record reads() writes(ev_draft)
        stream target:
            2 wait_draft: event_wait reads(ev_draft) writes()
            3 spec_verify_head_update: device_kernel [spec_verify_head_update__w3_bt4_bs16] reads(last_tokens, draft_tokens, seq_lens) writes(tokens, positions, row_kv_lens)
            4 target_replay: graph_replay [target_forward] reads(tokens, positions, row_kv_lens) writes(target_tokens)
        """)
    assert ctx.notes == []
    head = after.op("spec_verify_head_update")
    assert head.attr("members") == (f"dev_{TOKEN}", f"dev_{META}", f"dev_{TILING}")
    assert variant_of(head).family == "spec_verify_head_update"


def test_missing_member_is_refused_with_its_reason(apply_alone):
    before = _graph((TOKEN, META))
    after, ctx = apply_alone(FuseChain(), before)
    assert after.ops == before.ops
    assert ctx.notes == [
        "fuse-chain: spec_verify_head_update: not fused: members "
        "spec_verify_attention_tiling_update are not each one fused op"
    ]


def test_the_tail_carries_accepted_in_member_order_only(apply_alone):
    """verify-to-draft after fuse: greedy_prefix_verify then prepare_next_draft become spec_verify_tail_update,
    which reads the drafts and targets but not ``accepted`` (it computes it); with the two swapped, prepare would
    read the count before verification writes it, so fuse-chain refuses and says why."""
    from specgen.passes import build_boundary, run_pipeline

    fused, _ = run_pipeline(
        build_boundary("verify-to-draft", width=W, batch=B, block_size=BS, block_table_width=BT),
        "sync-to-event,hoist,fuse",
    )
    after, ctx = apply_alone(FuseChain(), fused)
    (tail,) = [o for o in after.ops if variant_of(o) is not None]
    assert variant_of(tail).family == "spec_verify_tail_update" and ctx.notes == []
    assert "accepted" in tail.writes and "accepted" not in tail.reads
    at = {variant_of(o).family: i for i, o in enumerate(fused.ops) if variant_of(o) is not None}
    ops = list(fused.ops)
    i, j = at["greedy_prefix_verify"], at["prepare_next_draft"]
    ops[i], ops[j] = ops[j], ops[i]
    swapped = fused.with_ops(ops)
    assert FuseChain().apply(PassContext(), swapped).ops == swapped.ops
    ctx = PassContext()
    FuseChain().apply(ctx, swapped)
    assert ctx.notes == ["fuse-chain: spec_verify_tail_update: not fused: the members run out of the composite's order"]
