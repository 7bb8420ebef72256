"""The op semantics composed by ``fuse`` equal the kernel families' torch semantics (``docs/kernels.md``)."""

import functools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specgen.passes import build_boundary, run_pipeline
from specgen.passes.ir import variant_of
from specgen.passes.ir.interpreter import interpret, random_inputs
from specgen.runtime.semantics import run_semantics

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
        run_semantics(variant.family, bufs, block_size=BS, num_splits=graph.params["num_splits"])
        for w, t in want.items():
            assert torch.equal(bufs[w].long(), t.long()), f"{name}: {variant.key}: '{w}' differs"
        checked.append(variant.family)
    return checked


@pytest.mark.parametrize("draft_dtype", ["int32", "int64"])
@pytest.mark.parametrize("width", [2, 4, 7])
def test_fused_ops_equal_the_family_references(width, draft_dtype):
    assert _fused_ops_against_references("draft-to-verify", width, draft_dtype) == ["spec_verify_head_update"]
    # the tails: verification and what follows it in one launch, the accepted count passed within a thread
    assert _fused_ops_against_references("verify-to-draft", width, draft_dtype) == ["spec_verify_tail_update"]
    assert _fused_ops_against_references("context-kv", width, draft_dtype) == ["spec_verify_context_tail_update"]


@functools.lru_cache(maxsize=None)
def _fused_graph(name, width, batch):
    before = build_boundary(name, width=width, batch=batch, block_size=BS, block_table_width=BT)
    return run_pipeline(before, "sync-to-event,hoist,fuse,fuse-chain")[0]


def _domain(name, width, batch):
    """Each fused op's inputs by name, drawn over the families' guarded domain (accepted up to W-1)."""
    blocks = BT * batch
    ranges = {
        "seq_lens": (0, BT * BS - width),
        "block_table": (0, blocks - 1),
        "accepted": (0, width - 1),
        "scratch_slot": (blocks * BS, blocks * BS),
    }
    return ranges.get(name, (0, 2))  # tokens from a small vocabulary, so drafts and targets often match


@pytest.mark.parametrize("name", ["draft-to-verify", "verify-to-draft", "context-kv"])
@pytest.mark.parametrize("width", [2, 4, 7])
@settings(max_examples=20, deadline=None)
@given(batch=st.integers(1, 4), data=st.data())
def test_boundary_semantics_equal_the_family_semantics(name, width, batch, data):
    graph = _fused_graph(name, width, batch)
    for op in graph.ops:
        variant = variant_of(op)
        if variant is None:
            continue
        bufs = {}
        for r in op.reads:
            v = graph.values[r]
            lo, hi = _domain(r, width, batch)
            n = math.prod(int(s) for s in v.shape)
            drawn = data.draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n), label=r)
            bufs[r] = torch.tensor(drawn, dtype=getattr(torch, v.dtype)).reshape(tuple(int(s) for s in v.shape))
        want = dict(zip(op.writes, op.fn(*(bufs[r] for r in op.reads))))
        bufs.update({w: torch.full_like(t, -777) for w, t in want.items()})
        run_semantics(variant.family, bufs, block_size=BS, num_splits=graph.params["num_splits"])
        for w, t in want.items():
            assert torch.equal(bufs[w].long(), t.long()), f"{name}: {variant.key}: '{w}' differs"
