"""fuse alone: the docstring's before/after as a golden text, the interpreter on both sides, refusals."""

from textwrap import dedent

from specgen.passes.fuse import Fuse
from specgen.passes.ir import BoundaryGraph, Op, OpKind, Placement, Value, variant_of
from specgen.passes.ir import op_semantics as sem
from specgen.passes.ir.render import render_text
from specgen.specializations.variants import VariantSpec

B, W, BS, BT = 2, 3, 16, 4
PARAMS = {"width": W, "batch": B, "block_size": BS, "block_table_width": BT}
HEADER = [
    "boundary fuse  start=final_draft end=target_replay",
    "params width=3 batch=2 block_size=16 block_table_width=4",
]
META = "spec_verify_metadata_update"


def _val(name, shape, persistent=True, init=None, placement=Placement.DEVICE):
    return Value(name, placement, shape, "int32", persistent, is_input=init is not None, init=init or "zeros")


def _lines(text):
    return HEADER + dedent(text).splitlines()


def _graph(slots_stream="target"):
    """final_draft; record; wait; dev_positions; dev_slots; dev_kv_lens; dev_query_start; target_replay."""
    values = [
        _val("draft_hidden", (B,), init="token"),
        _val("draft_tokens", (B, W - 1), init="token"),
        _val("seq_lens", (B,), init="seq_len"),
        _val("block_table", (B, BT), init="block_table"),
        _val("positions", (B * W,)),
        _val("slot_mapping", (B * W,)),
        _val("kv_lens", (B,)),
        _val("query_start_loc", (B + 1,)),
        _val("target_tokens", (B, W)),
        _val("ev_draft", (), False, placement=Placement.EVENT),
    ]
    family = {"family": META}
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
        Op(
            "dev_positions",
            OpKind.DEVICE_KERNEL,
            "target",
            ("seq_lens",),
            ("positions",),
            sem.positions(W),
            attrs=family,
        ),
        Op(
            "dev_slots",
            OpKind.DEVICE_KERNEL,
            slots_stream,
            ("seq_lens", "block_table"),
            ("slot_mapping",),
            sem.slots(W, BS),
            attrs=family,
        ),
        Op("dev_kv_lens", OpKind.DEVICE_KERNEL, "target", ("seq_lens",), ("kv_lens",), sem.kv_lens(W), attrs=family),
        Op(
            "dev_query_start",
            OpKind.DEVICE_KERNEL,
            "target",
            ("seq_lens",),
            ("query_start_loc",),
            sem.query_start(W),
            attrs=family,
        ),
        Op(
            "target_replay",
            OpKind.GRAPH_REPLAY,
            "target",
            ("draft_tokens", "positions", "slot_mapping", "kv_lens", "query_start_loc"),
            ("target_tokens",),
            lambda *xs: sem.mix(*xs, rows=B, cols=W),
            2000.0,
            {"graph_ops": ("target_forward",)},
        ),
    ]
    if slots_stream != "target":  # the replay needs an event for the slots written on the other stream
        values.append(_val("ev_slots", (), False, placement=Placement.EVENT))
        ops[5:5] = [
            Op("record_slots", OpKind.EVENT_RECORD, slots_stream, (), ("ev_slots",)),
            Op("wait_slots", OpKind.EVENT_WAIT, "target", ("ev_slots",)),
        ]
    return BoundaryGraph(
        "fuse",
        tuple(ops),
        {v.name: v for v in values},
        "final_draft",
        "target_replay",
        ("positions", "slot_mapping", "kv_lens", "query_start_loc", "target_tokens"),
        PARAMS,
        ("draft_tokens",),
    )


def test_golden_family_kernels_become_one_launch(apply_alone):
    before = _graph()
    assert render_text(before).splitlines() == _lines("""\
        stream draft:
            0 final_draft: device_kernel reads(draft_tokens, draft_hidden) writes(draft_tokens)
            1 record_draft: event_record reads() writes(ev_draft)
        stream target:
            2 wait_draft: event_wait reads(ev_draft) writes()
            3 dev_positions: device_kernel reads(seq_lens) writes(positions)
            4 dev_slots: device_kernel reads(seq_lens, block_table) writes(slot_mapping)
            5 dev_kv_lens: device_kernel reads(seq_lens) writes(kv_lens)
            6 dev_query_start: device_kernel reads(seq_lens) writes(query_start_loc)
            7 target_replay: graph_replay [target_forward] reads(draft_tokens, positions, slot_mapping, kv_lens, query_start_loc) writes(target_tokens)
        """)
    after, ctx = apply_alone(Fuse(), before)
    assert render_text(after).splitlines() == _lines("""\
        stream draft:
            0 final_draft: device_kernel reads(draft_tokens, draft_hidden) writes(draft_tokens)
            1 record_draft: event_record reads() writes(ev_draft)
        stream target:
            2 wait_draft: event_wait reads(ev_draft) writes()
            3 spec_verify_metadata_update: device_kernel [spec_verify_metadata_update__w3_bt4_bs16] reads(seq_lens, block_table) writes(positions, slot_mapping, kv_lens, query_start_loc)
            4 target_replay: graph_replay [target_forward] reads(draft_tokens, positions, slot_mapping, kv_lens, query_start_loc) writes(target_tokens)
        """)
    assert ctx.notes == []


def test_fused_op_carries_family_variant_and_members_only(apply_alone):
    after, _ = apply_alone(Fuse(), _graph())
    fused = after.op(META)
    assert dict(fused.attrs) == {
        "family": META,
        "variant": VariantSpec(META, W, BT, BS),
        "members": ("dev_positions", "dev_slots", "dev_kv_lens", "dev_query_start"),
    }
    assert variant_of(fused).key == "spec_verify_metadata_update__w3_bt4_bs16"
    assert variant_of(after.op("final_draft")) is None


def test_stream_mismatch_is_refused_and_remembered(apply_alone):
    before = _graph(slots_stream="aux")
    after, ctx = apply_alone(Fuse(), before)
    assert ctx.notes == ["fuse: spec_verify_metadata_update: not fused: stream mismatch aux vs target"]
    assert [o.name for o in after.ops] == [o.name for o in before.ops]
    assert (
        after.op("dev_slots").attr("unfused") == "spec_verify_metadata_update: not fused: stream mismatch aux vs target"
    )
    again, ctx = apply_alone(Fuse(), after)  # the refusal stays on the ops: no second attempt
    assert again.ops == after.ops and ctx.notes == []


def test_max_group_is_an_option(apply_alone):
    _, ctx = apply_alone(Fuse(max_group=3), _graph())
    assert ctx.notes == ["fuse: spec_verify_metadata_update: not fused: 4 members exceed max-group=3"]
