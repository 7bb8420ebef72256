"""The serving loop over the hybrid target on the GPU: ``qwen3.5-tiny`` in float32 (TF32 off), its forward on
the Triton kernels (the linear state read and written by slot), every step in CUDA graphs, under churn.

Every request's output equals the hybrid's plain greedy decoding of its prompt alone on the same device, cut
at its stop token or budget, in ``baseline`` and ``specgen``, tokens read one step late, with preemptions and
the lagged release; ``specgen`` runs every step on the fast path with 0 host syncs, its rows moved by the
``cuda`` remap variant, and 0 host syncs per prefill chunk (the prefill's token read late).  With
``step_first`` (the step launched before the prefill chunks) the same holds.

Kernels: SPECGEN_TEST_HYBRID_KERNELS, a build with ``--target c,cuda`` of the hybrid layout (tests/conftest.py).
"""

from __future__ import annotations

import pytest
import torch
from oracles.serving import churn_requests, cut_at_stop, frequent_tokens

from specgen.engine import AcceptanceMix, greedy_generate
from specgen.engine.draft_kinds import draft_kind
from specgen.engine.serving.loop import ServingLoop
from specgen.models.qwen3_5 import Qwen35Model

pytestmark = pytest.mark.gpu

BT, BS, W = 8, 16, 4


@pytest.fixture(scope="module")
def cuda_hybrid():
    torch.backends.cuda.matmul.allow_tf32 = False
    model = Qwen35Model.create("qwen3.5-tiny", seed=0, device="cuda")
    return model, draft_kind("mtp").create(model, seed=1)


@pytest.mark.parametrize("step_first", [False, True])
def test_cuda_hybrid_churn_is_exact_and_specgen_never_syncs(cuda_hybrid, hybrid_kernels, step_first):
    model, head = cuda_hybrid
    stops = frequent_tokens(model)
    reqs = churn_requests(model, stops, 40, seed=211 + step_first, rate=None)  # all at once: the batch saturates
    g = max(r.max_new_tokens for r in reqs) + 2 * W + 1  # one step unread
    oracle = [greedy_generate(model, [list(r.prompt)], g)[0] for r in reqs]
    rows = [cut_at_stop(o[: r.max_new_tokens], r.stop_ids) for o, r in zip(oracle, reqs)]
    mix = AcceptanceMix(0.7, torch.tensor(oracle, device="cuda"), vocab_size=model.config.vocab_size, seed=3)
    for mode in ("baseline", "specgen"):
        reqs = churn_requests(model, stops, 40, seed=211 + step_first, rate=None)  # fresh: a run appends to them
        loop = ServingLoop(
            model,
            head,
            mode=mode,
            depth=W - 1,
            max_batch=4,
            num_blocks=9,
            block_size=BS,
            block_table_width=BT,
            max_prefill_tokens=16,
            kernels=hybrid_kernels if mode == "specgen" else None,
            acceptance=mix,
            complete_lag=1,
            read_lag=1,
            step_first=step_first,
        )
        run = loop.run(reqs)
        for r, want in zip(reqs, rows):
            assert loop.requests[r.id].output == want, f"{mode}: request {r.id}"
        m = run.metrics()
        assert m["finished"] == len(reqs) and run.preemptions > 0, (mode, m["finished"], run.preemptions)
        assert loop.state.groups.free_count + loop.state.groups.pending_count == loop.state.groups.capacity
        t = m["transitions"]
        assert t["steps"] > 0, f"{mode}: no row moved"
        if mode == "specgen":
            assert all(s.fast_path and s.reason is None for s in run.steps), m["fallbacks"]
            assert m["host_syncs_per_step"] == 0 and m["host_syncs_per_prefill"] == 0
            assert t["kernel"] == t["steps"] and "target=cuda" in repr(loop.rows.kernel)
