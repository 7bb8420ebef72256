"""Prefill chunks run in padded buckets (``engine/serving/prefill_graphs.py``), on the CPU where the captured
body runs eagerly: a chunk's outputs and cache writes equal the eager chunk's; padding rows write nothing;
the serving loop with them on stays greedy and KV-isolated under churn; the hybrid target and bad requests
are refused by name."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch

from specgen.engine.serving import loop as loop_module
from specgen.engine.serving.loop import ServingLoop
from specgen.engine.serving.prefill import _eager
from specgen.engine.serving.prefill_graphs import BUCKETS, PrefillGraphs, buckets_for
from specgen.engine.serving.scheduler import PrefillChunk
from specgen.models.errors import EngineError

sys.path.insert(0, str(Path(__file__).parent))
from test_loop import BS, BT, Checks, ContextChecks, assert_exact, oracle_mix, serve, stops, workload  # noqa: E402

__all__ = ["stops"]  # the fixture, shared with test_loop


def test_buckets_for():
    assert buckets_for(2048) == BUCKETS == (16, 32, 64, 128, 192, 256, 384, 512)
    assert buckets_for(512) == BUCKETS
    assert buckets_for(300) == (16, 32, 64, 128, 192, 256, 300)
    assert buckets_for(16) == (16,) and buckets_for(8) == (8,)


def _caches(loop):
    out = [loop.model.kv_cache._k, loop.model.kv_cache._v]
    kv = getattr(loop.head, "kv_cache", None)
    return out + ([kv._k, kv._v] if kv is not None else [])


@pytest.mark.parametrize(
    "draft, device",
    [("mtp", "cpu"), ("dspark", "cpu"), *[pytest.param(d, "cuda", marks=pytest.mark.gpu) for d in ("mtp", "dspark")]],
)
def test_chunk_equals_eager(tiny, draft, device):
    """Chunks at every offset of a table (first, middle, last; one row; a bucket exactly full; a chunk whose
    head has no row): the same hidden state and logits as the eager chunk, the same cache contents, and
    nothing written outside the chunk's slots (the padding's slot -1 lands in the no-write slot only).  On
    the GPU the chunks replay captured graphs over the Triton forward."""
    from specgen.engine.draft_kinds import draft_kind
    from specgen.models import MTPHead, Qwen3Model

    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        model = Qwen3Model.create("tiny", seed=0, device="cuda")
        tiny = (model, MTPHead.create(model, seed=1))
    model, head = tiny
    pair = (model, draft_kind(draft).create(model, seed=1)) if draft != "mtp" else tiny
    loop = ServingLoop(
        *pair,
        mode="baseline",
        depth=3,
        max_batch=2,
        num_blocks=12,
        block_size=BS,
        block_table_width=BT,
        max_prefill_tokens=40,
        prefill_graphs=True,
    )
    loop._setup()
    graphs = loop.prefill_graphs
    assert graphs.buckets == (16, 32, 40) and set(graphs.graphs) == {(b, x) for b in (16, 32, 40) for x in (0, 1)}
    gen = torch.Generator().manual_seed(5)
    table = [3, 7, 1, 9, 4, 0, 0, 0]
    vocab = model.config.vocab_size
    prefix = torch.randint(0, vocab, (120,), generator=gen).tolist()
    assert loop.device.type == device and (graphs.pool is not None) == (device == "cuda")
    cases = [
        (0, 16, False, 120),
        (16, 40, False, 120),
        (56, 1, False, 120),
        (57, 32, True, 89),
        (88, 1, True, 89),
        (0, 5, True, 5),
        (100, 20, True, 120),
    ]
    with torch.inference_mode():
        for s, n, last, P in cases:
            req = types.SimpleNamespace(id=0, prefill_len=P, prefix=prefix[: P + 1])
            chunk = PrefillChunk(0, s, tuple(prefix[s : s + n]), last)
            # the head's position 0 is cleared by prefill_chunk around both paths: leave it out of the comparison
            start = [c.clone() for c in _caches(loop)]
            bt = torch.tensor(table, dtype=torch.int32, device=device)[None]
            hidden, logits = _eager(loop, req, chunk, bt, graphs.block)
            want = [c.clone() for c in _caches(loop)]
            for c, s0 in zip(_caches(loop), start):
                c.copy_(s0)
            m = max(0, min(s + n, P - 1) - s)
            g_hidden, g_logits = graphs.run(s, chunk.tokens, prefix[s + 1 : s + 1 + m], table, last)
            got = _caches(loop)
            for w, g, s0 in zip(want, got, start):  # [layers, slots + 1, heads, dim]
                trash = w.shape[1] - 1  # slot -1's row: the padding writes it, the eager chunk may not
                torch.testing.assert_close(g[:, :trash], w[:, :trash], atol=1e-5, rtol=1e-5)
                changed = (g[:, :trash] != s0[:, :trash]).transpose(0, 1).flatten(1).any(1).nonzero().flatten().tolist()
                allowed = {table[p // BS] * BS + p % BS for p in range(s, s + n + 1)}
                assert set(changed) <= allowed, (s, n, sorted(set(changed) - allowed)[:4])
            if hidden is not None:
                torch.testing.assert_close(g_hidden[:n], hidden[:n], atol=1e-5, rtol=1e-5)
            if last:
                assert g_logits.shape == logits.shape == (1, vocab)
                torch.testing.assert_close(g_logits, logits, atol=1e-5, rtol=1e-5)
                assert int(g_logits.argmax()) == int(logits.argmax())
    assert graphs.replays == len(cases)
    with pytest.raises(ValueError, match="a chunk of 41 rows has no bucket"):
        graphs.run(0, tuple(range(41)), (), table, True)


@pytest.mark.parametrize(
    "mode, draft, read_lag", [("baseline", "mtp", 0), ("specgen", "mtp", 1), ("specgen", "dspark", 1)]
)
def test_served_with_prefill_graphs(tiny, engine_kernels, block_kernels, stops, monkeypatch, mode, draft, read_lag):
    """Churn with every chunk in a bucket (budgets of 40 tokens: buckets 16, 32, 40): outputs greedy, none
    lost, KV isolated after every iteration, preemptions, every chunk a replay."""
    from specgen.engine.draft_kinds import draft_kind

    model, _ = tiny
    chunks = []
    run_chunk = PrefillGraphs.run
    monkeypatch.setattr(PrefillGraphs, "run", lambda self, s, t, *a: chunks.append(len(t)) or run_chunk(self, s, t, *a))
    reqs = workload(model, stops, 40, seed=71 + read_lag, rate=80.0)
    pair = (model, draft_kind(draft).create(model, seed=1)) if draft != "mtp" else tiny
    lib = block_kernels if draft != "mtp" else engine_kernels
    kw = dict(read_lag=read_lag, acceptance=oracle_mix(model, reqs, 0.7, 4), complete_lag=1, num_blocks=9)
    loop, run, checks = serve(
        pair,
        lib,
        mode,
        reqs,
        check=Checks if draft == "mtp" else ContextChecks,
        max_prefill_tokens=40,
        prefill_graphs=True,
        **kw,
    )
    assert_exact(model, loop, run, reqs)
    assert run.settings["prefill_graphs"] == [16, 32, 40] and run.preemptions > 0 and checks.iterations > 0
    assert len(chunks) == run.prefill_chunks == loop.prefill_graphs.replays
    assert len({loop.prefill_graphs.bucket(n) for n in chunks}) > 1  # chunks in more than one bucket


def test_off_and_refused(tiny, stops):
    from specgen.engine.draft_kinds import draft_kind
    from specgen.models import Qwen35Model

    model, head = tiny
    reqs = workload(model, stops, 6, seed=3, rate=None)
    loop, run, _ = serve(tiny, None, "baseline", reqs)  # the CPU's default: eager chunks
    assert loop.prefill_graphs is None and run.settings["prefill_graphs"] is None
    assert_exact(model, loop, run, reqs)
    target = Qwen35Model.create("qwen3.5-tiny", seed=0)
    mtp = draft_kind("mtp").create(target, seed=1)
    loop = ServingLoop(
        target,
        mtp,
        mode="baseline",
        depth=3,
        max_batch=2,
        num_blocks=8,
        block_size=BS,
        block_table_width=BT,
        prefill_graphs=True,
    )
    with pytest.raises(EngineError, match="prefill graphs: a hybrid target's prefill carries linear-state slots"):
        loop._setup()
    assert loop_module.PrefillGraphs is PrefillGraphs
