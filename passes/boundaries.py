"""The pipeline boundaries as "before" graphs, as the public pull requests of docs/references.md describe them.

* ``draft-to-verify`` (xLLM #1962, the final draft -> target verification of
  MTP): after the final draft the host syncs, stacks and casts tokens,
  recomputes positions / slots / KV lengths / query offsets / paged-attention
  tiling, copies each to the device, patches the causal-conv graph task and
  replays the target graph.
* ``verify-to-draft`` (xLLM #1966, the validate -> next draft handoff): after
  verification the host syncs, copies acceptance results down, rebuilds the
  next draft's inputs and copies them back before launching the next draft.
* ``draft-to-verify-linear``: ``draft-to-verify`` of a hybrid target (linear
  attention, Qwen3.5-style; the reference PRs' own model): the host also picks
  the linear state's read slot from the previous step's accepted count and every
  verify row's write slot, and copies them in.
* ``context-kv`` (the xLLM pull request that captures DSpark's context-KV
  updates in ACL graphs): block drafts (DFlash/DSpark) write context K/V for
  the accepted rows; the host masks rejected rows before the copy.
* ``verify-to-draft-sampled`` and ``context-kv-sampled``: the same two tails for
  a batch that samples (``sampling=True``).  The sampling parameters and the
  draft's probabilities of its tokens are copied in with the other sources; the
  vocabulary pass after the target forward (``sample_rows``: filtered
  softmax, each row's residual or bonus draw, ``p_j(x_j)``, the acceptance
  uniforms; ``runtime.sampling.rejection_inputs``) is a device op of its own,
  and acceptance is speculative rejection sampling (``spec_rejection_verify``)
  instead of greedy matching.  The next draft's preparation is unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from ..specializations.capabilities import SpeculativeVerifyCapabilities as Capabilities
from ..specializations.families import LINEAR_STATE
from ..specializations.plan import (
    CONTEXT_KV,
    LINEAR_DRAFT_TO_VERIFY,
    SAMPLED_CONTEXT_KV,
    SAMPLED_VERIFY_TO_DRAFT,
    VERIFY_TO_DRAFT,
    PlanStep,
)
from .acceptance import commit_on_host, verify_and_accept
from .builder import HOST, GraphBuilder, K, P, boundary_params
from .ir import BoundaryGraph, BoundaryGraphError
from .ir import op_semantics as sem


def draft_to_verify(
    width=4,
    batch=1,
    block_size=128,
    block_table_width=64,
    draft_dtype="int32",
    caps: Capabilities = Capabilities(),
    draft_us=300.0,
    forward_us=2250.0,
) -> BoundaryGraph:
    W, B, BS, BT = width, batch, block_size, block_table_width
    b = GraphBuilder(
        LINEAR_DRAFT_TO_VERIFY if caps.has_linear_state else "draft-to-verify",
        boundary_params(W, B, BS, BT, draft_dtype),
    )
    NS = b.params["num_splits"]
    b.val("draft_hidden", P.DEVICE, (B,), "int64", persistent=True, init="token")
    b.val("draft_tokens", P.DEVICE, (B, W - 1), draft_dtype, persistent=True, init="zeros")
    b.val("seq_lens_sched", P.HOST, (B,), init="seq_len")
    b.val("block_table_sched", P.HOST, (B, BT), init="block_table")
    b.val("last_tokens", P.DEVICE, (B,), persistent=True, init="token")  # the previous step's bonus token
    for i in range(W - 1):  # draft steps 1..N; the last is the final draft
        name = "final_draft" if i == W - 2 else f"draft_step_{i + 1}"
        b.op(
            name,
            K.DEVICE_KERNEL,
            "draft",
            ["draft_tokens", "draft_hidden"],
            ["draft_tokens"],
            sem.draft_step(i),
            draft_us,
        )
    # The bubble: everything below waits for the final draft token on the host.
    b.val("draft_tokens_host", P.PINNED, (B, W - 1), draft_dtype)
    b.val("last_tokens_host", P.PINNED, (B,))
    b.op("d2h_draft_tokens", K.D2H, "draft", ["last_tokens", "draft_tokens"], ["last_tokens_host", "draft_tokens_host"])
    b.op("sync_final_draft", K.HOST_SYNC, HOST, ["last_tokens_host", "draft_tokens_host"])
    b.val("tokens_host", P.PINNED, (B * W,))
    b.val("tokens", P.DEVICE, (B * W,), persistent=True)
    b.op(
        "host_stack_tokens",
        K.HOST_COMPUTE,
        HOST,
        ["last_tokens_host", "draft_tokens_host"],
        ["tokens_host"],
        sem.stack_tokens,
        family="spec_verify_token_update",
    )
    b.op("h2d_tokens", K.H2D, "target", ["tokens_host"], ["tokens"])
    b.host_input_with_copy("seq_lens_sched", "seq_lens", (B,), "seq_len", "target")
    b.host_input_with_copy("block_table_sched", "block_table", (B, BT), "block_table", "target")
    shapes = {"positions": (B * W,), "slot_mapping": (B * W,), "kv_lens": (B,), "query_start_loc": (B + 1,)}
    meta = "spec_verify_metadata_update"
    b.host_chain("positions", meta, sem.positions(W), ["seq_lens_sched"], ["positions"], "target", shapes)
    b.host_chain(
        "slots", meta, sem.slots(W, BS), ["seq_lens_sched", "block_table_sched"], ["slot_mapping"], "target", shapes
    )
    b.host_chain("kv_lens", meta, sem.kv_lens(W), ["seq_lens_sched"], ["kv_lens"], "target", shapes)
    b.host_chain("query_start", meta, sem.query_start(W), ["seq_lens_sched"], ["query_start_loc"], "target", shapes)
    tiles = ["row_kv_lens", "row_num_blocks", "row_last_block_len", "row_block_offsets", "max_kv_len", "kv_split_len"]
    tshape = dict(zip(tiles, [(B * W,)] * 3 + [(B * W + 1,), (1,), (1,)]))
    b.host_chain(
        "tiling_setup",
        "spec_verify_attention_tiling_update",
        sem.tiling(W, BS, NS),
        ["seq_lens_sched"],
        tiles,
        "target",
        tshape,
    )
    graph_reads = ["tokens", "positions", "slot_mapping", "kv_lens", "query_start_loc", "block_table", *tiles]
    if caps.has_linear_state:
        # The hybrid's linear-attention state (Qwen3.5-style targets): the host picks the slot each
        # sequence's committed state is in from the previous step's accepted count, and the slot
        # every verify row's state goes to, and copies both in (spec_verify_linear_state_update).
        b.host_input_with_copy("accepted_sched", "accepted", (B,), "rand", "target")
        b.host_input_with_copy("state_slots_sched", "state_slots", (B, W), "rand", "target")
        lin = {"state_read_slot": (B,), "state_write_slots": (B * W,)}
        b.host_chain(
            "linear_state",
            LINEAR_STATE,
            sem.linear_state,
            ["accepted_sched", "state_slots_sched"],
            list(lin),
            "target",
            lin,
        )
        graph_reads += list(lin)
    if caps.graph_task_update:
        b.val("graph_task_params", P.PINNED, (B,), persistent=True)
        b.op(
            "update_graph_task",
            K.GRAPH_TASK_UPDATE,
            HOST,
            ["seq_lens_sched"],
            ["graph_task_params"],
            sem.graph_task_params,
        )
        graph_reads.append("graph_task_params")
    b.val("target_tokens", P.DEVICE, (B, W), persistent=True)
    b.op(
        "target_replay",
        K.GRAPH_REPLAY,
        "target",
        graph_reads,
        ["target_tokens"],
        lambda *xs: sem.mix(*xs, rows=B, cols=W),
        forward_us,
        graph_ops=("target_forward",),
        graph_steps=(PlanStep.forward(),),
    )
    outputs = [v for v in graph_reads if b.values[v].placement is not P.PINNED] + ["target_tokens"]
    return b.build("final_draft", "target_replay", outputs, ["draft_tokens"])


def verify_to_draft(
    width=4,
    batch=1,
    block_size=128,
    block_table_width=64,
    draft_dtype="int32",
    caps: Capabilities = Capabilities(),
    forward_us=2250.0,
    draft_us=300.0,
    sampling: bool = False,
) -> BoundaryGraph:
    W, B, BS, BT = width, batch, block_size, block_table_width
    b = GraphBuilder(
        SAMPLED_VERIFY_TO_DRAFT if sampling else VERIFY_TO_DRAFT, boundary_params(W, B, BS, BT, draft_dtype)
    )
    token = verify_and_accept(b, W, B, BS, BT, forward_us, sampling)
    shapes = {
        "next_last_token": (B,),
        "next_seq_lens": (B,),
        "draft_positions": (B, 2),
        "draft_slots": (B, 2),
        "hidden_rows": (B, 2),
    }
    fam = "prepare_next_draft"
    acc, tt, sl, bt = "accepted_host", "target_tokens_host", "seq_lens_sched", "block_table_sched"
    b.host_chain("next_last_token", fam, sem.next_last_token, [acc, tt], ["next_last_token"], "draft", shapes)
    b.host_chain("next_seq_lens", fam, sem.next_seq_lens, [acc, sl], ["next_seq_lens"], "draft", shapes)
    b.host_chain("draft_positions", fam, sem.draft_positions, [acc, sl], ["draft_positions"], "draft", shapes)
    b.host_chain(
        "draft_slots",
        fam,
        sem.draft_slots(W, BS),
        [acc, sl, bt, "scratch_slot_sched"],
        ["draft_slots"],
        "draft",
        shapes,
    )
    b.host_chain("hidden_rows", fam, sem.hidden_rows(W), [acc], ["hidden_rows"], "draft", shapes)
    reads = list(shapes)
    b.val("draft_out", P.DEVICE, (B, 2), persistent=True)
    b.op(
        "next_draft", K.DEVICE_KERNEL, "draft", reads, ["draft_out"], lambda *xs: sem.mix(*xs, rows=B, cols=2), draft_us
    )
    commit_on_host(b, W, B, sampling)
    return b.build(
        "target_replay", "next_draft", [*reads, "draft_out", "accepted", "next_tokens", "committed"], [token]
    )


def context_kv(
    width=4,
    batch=1,
    block_size=128,
    block_table_width=64,
    draft_dtype="int32",
    caps: Capabilities = Capabilities(),
    forward_us=2250.0,
    draft_us=300.0,
    sampling: bool = False,
) -> BoundaryGraph:
    W, B, BS, BT = width, batch, block_size, block_table_width
    b = GraphBuilder(SAMPLED_CONTEXT_KV if sampling else CONTEXT_KV, boundary_params(W, B, BS, BT, draft_dtype))
    token = verify_and_accept(b, W, B, BS, BT, forward_us, sampling)
    # the next block's anchor: the bonus token at the new length (what the block forward reads next), then the
    # accepted rows' context slots (the order of the tail composite's members)
    nxt = "prepare_next_block"
    shapes = {"next_last_token": (B,), "next_seq_lens": (B,)}
    acc, tt, sl = "accepted_host", "target_tokens_host", "seq_lens_sched"
    b.host_chain("next_last_token", nxt, sem.next_last_token, [acc, tt], ["next_last_token"], "draft", shapes)
    b.host_chain("next_seq_lens", nxt, sem.next_seq_lens, [acc, sl], ["next_seq_lens"], "draft", shapes)
    fam = "context_kv_update"
    b.val("context_slots_all_host", P.PINNED, (B * W,))
    b.op(
        "host_context_slots",
        K.HOST_COMPUTE,
        HOST,
        ["seq_lens_sched", "block_table_sched"],
        ["context_slots_all_host"],
        sem.context_slots_all(W, BS),
        family=fam,
    )
    b.val("context_slots_host", P.PINNED, (B * W,))
    b.val("context_slots", P.DEVICE, (B * W,), persistent=True)
    b.op(
        "host_context_mask",
        K.HOST_COMPUTE,
        HOST,
        ["accepted_host", "context_slots_all_host"],
        ["context_slots_host"],
        sem.context_mask(W),
        family=fam,
    )
    b.op("h2d_context_slots", K.H2D, "draft", ["context_slots_host"], ["context_slots"])
    b.val("draft_context_kv", P.DEVICE, (B, W), persistent=True)
    b.op(
        "context_kv_write",
        K.DEVICE_KERNEL,
        "draft",
        ["context_slots", "target_tokens"],
        ["draft_context_kv"],
        lambda *xs: sem.mix(*xs, rows=B, cols=W),
        draft_us / 10,
    )
    commit_on_host(b, W, B, sampling)
    return b.build(
        "target_replay",
        "context_kv_write",
        [*shapes, "context_slots", "draft_context_kv", "accepted", "next_tokens", "committed"],
        [token],
    )


def draft_to_verify_linear(caps: Capabilities = Capabilities(), **kwargs) -> BoundaryGraph:
    """``draft-to-verify`` of a target with linear-attention state (``has_linear_state`` set)."""
    return draft_to_verify(caps=dataclasses.replace(caps, has_linear_state=True), **kwargs)


def verify_to_draft_sampled(**kwargs) -> BoundaryGraph:
    """``verify-to-draft`` for a batch that samples (``sampling`` set)."""
    return verify_to_draft(sampling=True, **kwargs)


def context_kv_sampled(**kwargs) -> BoundaryGraph:
    """``context-kv`` for a batch that samples (``sampling`` set)."""
    return context_kv(sampling=True, **kwargs)


BOUNDARIES: dict[str, Callable[..., BoundaryGraph]] = {
    "draft-to-verify": draft_to_verify,
    LINEAR_DRAFT_TO_VERIFY: draft_to_verify_linear,
    VERIFY_TO_DRAFT: verify_to_draft,
    CONTEXT_KV: context_kv,
    SAMPLED_VERIFY_TO_DRAFT: verify_to_draft_sampled,
    SAMPLED_CONTEXT_KV: context_kv_sampled,
}


def build_boundary(name: str, **kwargs) -> BoundaryGraph:
    if name not in BOUNDARIES:
        raise BoundaryGraphError(f"unknown boundary '{name}' (known: {', '.join(BOUNDARIES)})")
    return BOUNDARIES[name](**kwargs)
