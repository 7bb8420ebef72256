"""The op semantics composed by ``fuse`` equal the kernel families' torch semantics (``docs/kernels.md``)."""

import pytest
import torch

from specgen.passes import build_boundary, run_pipeline
from specgen.passes.ir import variant_of
from specgen.passes.ir.interpreter import interpret, random_inputs
from specgen.runtime.semantics import run_reference

BS, BT = 16, 8


def _fused_ops_against_references(name, width, draft_dtype):
    before = build_boundary(name, width=width, batch=3, block_size=BS, block_table_width=BT, draft_dtype=draft_dtype)
    graph, _ = run_pipeline(before, "sync-to-event,hoist,fuse,fuse-chain")
    inputs = random_inputs(graph, seed=width)
    checked = []
    for i, op in enumerate(graph.ops):
        variant = variant_of(op)
        if variant is None:
            continue
        env = interpret(graph.with_ops(graph.ops[:i]), inputs)  # the values the op reads, where it runs
        want = dict(zip(op.writes, op.fn(*(env[r] for r in op.reads))))
        bufs = {r: env[r] for r in op.reads}
        bufs.update({w: torch.full_like(t, -777) for w, t in want.items()})
        run_reference(variant.family, bufs, block_size=BS, num_splits=graph.params["num_splits"])
        for w, t in want.items():
            assert torch.equal(bufs[w].long(), t.long()), f"{name}: {variant.key}: '{w}' differs"
        checked.append(variant.family)
    return checked


@pytest.mark.parametrize("draft_dtype", ["int32", "int64"])
@pytest.mark.parametrize("width", [2, 4, 7])
def test_fused_ops_equal_the_family_references(width, draft_dtype):
    assert _fused_ops_against_references("draft-to-verify", width, draft_dtype) == ["spec_verify_head_update"]
    assert sorted(_fused_ops_against_references("verify-to-draft", width, draft_dtype)) == [
        "greedy_prefix_verify", "prepare_next_draft"]
    assert sorted(_fused_ops_against_references("context-kv", width, draft_dtype)) == [
        "context_kv_update", "greedy_prefix_verify"]
