"""The families as torch custom ops: eager, compiled and inside a CUDA graph."""

from __future__ import annotations

import pytest
import torch

W = 4
FAMILY = "spec_verify_token_update"
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def reference(last, draft):
    return torch.cat([last[:, None], draft.to(torch.int32)], dim=1).reshape(-1)


def inputs(B, dtype=torch.int32, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    last = torch.randint(0, 1000, (B,), generator=g, dtype=torch.int32)
    draft = torch.randint(0, 1000, (B, W - 1), generator=g).to(dtype)
    return last.to(device), draft.to(device), torch.full((B * W,), -7, dtype=torch.int32, device=device)


def test_custom_op_eager_and_compiled(token_build):
    import importlib

    from specgen.runtime import ops

    importlib.reload(ops)  # registration is idempotent
    previous = ops.use_library(token_build)
    try:
        op = torch.ops.specgen.spec_verify_token_update
        last, draft, tokens = inputs(6)
        op(last, draft, tokens, W)
        assert torch.equal(tokens, reference(last, draft))

        def step(last, draft, tokens):
            torch.ops.specgen.spec_verify_token_update(last, draft, tokens, W)
            return tokens + 1

        compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
        last, draft, tokens = inputs(6, seed=1)
        got = compiled(last, draft, tokens)
        assert torch.equal(tokens, reference(last, draft)) and torch.equal(got, tokens + 1)
    finally:
        ops.use_library(previous)


@pytest.mark.gpu
@needs_cuda
def test_cuda_custom_op_in_graph(make_token_build, tmp_path):
    from specgen.runtime import ops

    previous = ops.use_library(make_token_build(tmp_path, targets=("cuda",)))
    try:
        last, draft, tokens = inputs(33, torch.int64, device="cuda")
        torch.ops.specgen.spec_verify_token_update(last, draft, tokens, W)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            torch.ops.specgen.spec_verify_token_update(last, draft, tokens, W)
        draft.add_(5), tokens.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(tokens, reference(last, draft))
    finally:
        ops.use_library(previous)
