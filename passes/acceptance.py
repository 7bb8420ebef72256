"""Verification and acceptance in the tail boundaries' "before" graphs, greedy or sampled.

``verify_and_accept`` adds the sources an engine copies in, the target's replay and acceptance as
small device ops tagged with their family (``greedy_prefix_verify``, or ``spec_rejection_verify``
for a batch that samples, after the vocabulary pass ``sample_rows``); ``commit_on_host`` the
scheduler's read of the result.
"""

from __future__ import annotations

from ..specializations.families import GREEDY_VERIFY, REJECTION_VERIFY
from ..specializations.plan import PlanStep
from .builder import HOST, GraphBuilder, K, P
from .ir import op_semantics as sem


def verify_and_accept(b: GraphBuilder, W, B, BS, BT, forward_us, sampling: bool = False) -> str:
    """Sources copied in earlier steps, the verification replay, and acceptance as small torch ops.

    Greedy: the replay writes the target's tokens and acceptance compares them with the drafts.
    Sampling: the sampling parameters and the draft's ``q(x_j)`` are sources too, the replay writes the
    logits, the vocabulary pass ``sample_rows`` turns them into each row's token, ``p_j(x_j)`` and the
    acceptance uniforms, and acceptance is the rejection rule.  Returns the value the replay writes
    (the boundary's token source).
    """
    b.host_input_with_copy("seq_lens_sched", "seq_lens", (B,), "seq_len", "prepare")
    b.host_input_with_copy("block_table_sched", "block_table", (B, BT), "block_table", "prepare")
    b.host_input_with_copy("scratch_slot_sched", "scratch_slot", (1,), "scratch_slot", "prepare")
    b.host_input_with_copy("draft_tokens_sched", "draft_tokens", (B, W - 1), "token", "prepare")
    sampling_params = ("temperature", "top_k", "top_p", "seeds")
    if sampling:
        b.host_input_with_copy("draft_probs_sched", "draft_probs", (B, W - 1), "prob", "prepare", "float32")
        for name, init, dtype in zip(
            sampling_params, ("temperature", "top_k", "prob", "seed"), ("float32", "int32", "float32", "int64")
        ):
            b.host_input_with_copy(f"{name}_sched", name, (B,), init, "prepare", dtype)
    b.op("sources_ready", K.EVENT_RECORD, "prepare", [], ["ev_sources"])
    b.val("ev_sources", P.EVENT, ())
    b.op("wait_sources", K.EVENT_WAIT, "target", ["ev_sources"], [])
    b.val("target_tokens", P.DEVICE, (B, W), persistent=True)
    replayed = "target_logits" if sampling else "target_tokens"
    if sampling:
        b.val("target_logits", P.DEVICE, (B, W), "float32", persistent=True)
    b.op(
        "target_replay",
        K.GRAPH_REPLAY,
        "target",
        ["draft_tokens", "seq_lens", "block_table"],
        [replayed],
        sem.logits(B, W) if sampling else lambda *xs: sem.mix(*xs, rows=B, cols=W),
        forward_us,
        graph_ops=("target_forward",),
        graph_steps=(PlanStep.forward(),),
    )
    b.val("accept_mask", P.DEVICE, (B, W - 1))
    b.val("accepted", P.DEVICE, (B,), persistent=True)
    b.val("next_tokens", P.DEVICE, (B, W), persistent=True)
    if sampling:
        floats = ("target_draft_probs", "accept_uniforms")
        for name in floats:
            b.val(name, P.DEVICE, (B, W - 1), "float32", persistent=True)
        b.op(
            "sample_rows",
            K.DEVICE_KERNEL,
            "target",
            ["target_logits", "draft_tokens", "draft_probs", *sampling_params, "seq_lens"],
            ["target_tokens", *floats],
            sem.sample_rows,
        )
        ratio = ["draft_tokens", "target_tokens", "draft_probs", *floats, "temperature"]
        b.op(
            "accept_ratio", K.DEVICE_KERNEL, "target", ratio, ["accept_mask"], sem.accept_ratio, family=REJECTION_VERIFY
        )
        b.op(
            "accept_len",
            K.DEVICE_KERNEL,
            "target",
            ["accept_mask"],
            ["accepted"],
            sem.accept_len,
            family=REJECTION_VERIFY,
        )
        b.op(
            "accept_select",
            K.DEVICE_KERNEL,
            "target",
            ["accepted", "draft_tokens", "target_tokens"],
            ["next_tokens"],
            sem.sampled_select,
            family=REJECTION_VERIFY,
        )
    else:
        b.op(
            "accept_match",
            K.DEVICE_KERNEL,
            "target",
            ["draft_tokens", "target_tokens"],
            ["accept_mask"],
            sem.accept_match,
            family=GREEDY_VERIFY,
        )
        b.op(
            "accept_len", K.DEVICE_KERNEL, "target", ["accept_mask"], ["accepted"], sem.accept_len, family=GREEDY_VERIFY
        )
        b.op(
            "accept_select",
            K.DEVICE_KERNEL,
            "target",
            ["accepted", "target_tokens"],
            ["next_tokens"],
            sem.accept_select,
            family=GREEDY_VERIFY,
        )
    b.val("accepted_host", P.PINNED, (B,), persistent=True)
    b.val("target_tokens_host", P.PINNED, (B, W), persistent=True)
    b.op("d2h_accepted", K.D2H, "target", ["accepted"], ["accepted_host"])
    b.op("d2h_target_tokens", K.D2H, "target", ["target_tokens"], ["target_tokens_host"])
    b.op("sync_accept", K.HOST_SYNC, HOST, ["accepted_host", "target_tokens_host"])
    return replayed


def commit_on_host(b: GraphBuilder, W, B, sampling: bool = False) -> None:
    """The scheduler's own use of the result: a host-only consumer (a sampled row commits its accepted drafts,
    which the host has, then the row's token)."""
    b.val("committed", P.HOST, (B, W))
    if sampling:
        reads, fn = ["accepted_host", "draft_tokens_sched", "target_tokens_host"], sem.sampled_select
    else:
        reads, fn = ["accepted_host", "target_tokens_host"], sem.accept_select
    b.op("host_commit", K.HOST_COMPUTE, HOST, reads, ["committed"], fn)
