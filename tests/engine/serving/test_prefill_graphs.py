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
    head has no row): the same hidden state and logits as the eager chunk, the same cache contents (the head's
    position 0 cleared by a first chunk), and nothing written outside the chunk's slots (the padding's slot -1
    lands in the no-write slot only).  A greedy last chunk's ``join`` graph also gives the argmax and writes the
    held staging row as ``BatchRows.join`` does.  On the GPU the chunks replay graphs over the Triton forward."""
    from specgen.engine.draft_kinds import draft_kind
    from specgen.engine.serving.rows import Joined
    from specgen.models import MTPHead, Qwen3Model

    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        model = Qwen3Model.create("tiny", seed=0, device="cuda")
        tiny = (model, MTPHead.create(model, seed=1))
    model, head = tiny
    pair = (model, draft_kind(draft).create(model, seed=1)) if draft != "mtp" else tiny
    kw = dict(mode="baseline", depth=3, max_batch=2, num_blocks=12, block_size=BS, block_table_width=BT)
    loop = ServingLoop(*pair, **kw, max_prefill_tokens=40, prefill_graphs=True)
    loop.run([])  # set-up: the row stage, then the graphs
    graphs = loop.prefill_graphs
    kinds = ("mid", "last", "join")
    assert graphs.buckets == (16, 32, 40) and set(graphs.graphs) == {(b, k) for b in (16, 32, 40) for k in kinds}
    gen = torch.Generator().manual_seed(5)
    table = [3, 7, 1, 9, 4, 10, 2, 11]  # distinct blocks: no two positions share a slot
    vocab, W = model.config.vocab_size, loop.width
    prefix = torch.randint(0, vocab, (121,), generator=gen).tolist()
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
    stage = loop.rows.stage
    with torch.inference_mode():
        for s, n, last, P in cases:
            req = types.SimpleNamespace(id=0, prefill_len=P, prefix=prefix[: P + 1])
            chunk = PrefillChunk(0, s, tuple(prefix[s : s + n]), last)
            start = [c.clone() for c in _caches(loop)]
            bt = torch.tensor(table, dtype=torch.int32, device=device)[None]
            hidden, logits = _eager(loop, req, chunk, bt, graphs.block)
            want = [c.clone() for c in _caches(loop)]
            m = max(0, min(s + n, P - 1) - s)
            for kind in ("last", "join") if last else ("mid",):
                for c, s0 in zip(_caches(loop), start):
                    c.copy_(s0)
                staged = loop.rows.join(9, Joined(prefix[P - 1], 0, None, P), None, None) if kind == "join" else 0
                g_hidden, g_logits, token = graphs.run(
                    s, chunk.tokens, prefix[s + 1 : s + 1 + m], table, kind, (staged, prefix[P - 1], P)
                )
                for w, g, s0 in zip(want, _caches(loop), start):  # [layers, slots + 1, heads, dim]
                    trash = w.shape[1] - 1  # slot -1's row: the padding writes it, the eager chunk may not
                    torch.testing.assert_close(g[:, :trash], w[:, :trash], atol=1e-5, rtol=1e-5)
                    changed = (g[:, :trash] != s0[:, :trash]).transpose(0, 1).flatten(1).any(1).nonzero().flatten()
                    allowed = {table[p // BS] * BS + p % BS for p in range(s, s + n + 1)}
                    assert set(changed.tolist()) <= allowed, (s, n, sorted(set(changed.tolist()) - allowed)[:4])
                if hidden is not None:
                    torch.testing.assert_close(g_hidden[:n], hidden[:n], atol=1e-5, rtol=1e-5)
                if kind == "mid":
                    assert token is None
                    continue
                assert g_logits.shape == logits.shape == (1, vocab)
                torch.testing.assert_close(g_logits, logits, atol=1e-5, rtol=1e-5)
                if kind == "join":
                    assert token.dtype == torch.int32 and int(token[0]) == int(logits.argmax())
                    assert stage.src("tokens")[staged * W : (staged + 1) * W].tolist() == [prefix[P - 1], 0, 0, 0]
                    assert int(stage.src("accepted")[staged]) == 0 and int(stage.src("next_seq_lens")[staged]) == P
                    assert int(stage.src("next_last_token")[staged]) == int(token[0])
                    if hidden is not None:
                        verify = loop.engine.verify_hidden[staged * W]
                        torch.testing.assert_close(verify, hidden[n - 1].to(verify.dtype), atol=1e-5, rtol=1e-5)
    assert graphs.replays == sum(2 if last else 1 for _, _, last, _ in cases)
    with pytest.raises(ValueError, match="a chunk of 41 rows has no bucket"):
        graphs.run(0, tuple(range(41)), (), table, "last")
    with pytest.raises(ValueError, match="a chunk's kind is one of"):
        graphs.run(0, (1, 2), (), table, "first")


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
    monkeypatch.setattr(
        PrefillGraphs,
        "run",
        lambda self, s, t, *a, **k: chunks.append((len(t), a[2])) or run_chunk(self, s, t, *a, **k),
    )
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
    assert len({loop.prefill_graphs.bucket(n) for n, _ in chunks}) > 1  # chunks in more than one bucket
    # every request's last chunk took its token and wrote its staging row in the graph (all are greedy)
    assert {k for _, k in chunks} <= {"mid", "join"} and sum(k == "join" for _, k in chunks) >= len(reqs)


@pytest.mark.parametrize("draft", ["mtp", "dspark"])
def test_chunks_longer_than_every_bucket_replay_pieces(tiny, engine_kernels, block_kernels, stops, monkeypatch, draft):
    """With 16 rows the largest bucket, the scheduler's chunks of up to 40 tokens replay 16-row ``mid`` pieces
    and their own kind over the rest: outputs greedy, KV isolated, no chunk eager."""
    from specgen.engine.draft_kinds import draft_kind
    from specgen.engine.serving import prefill as prefill_module
    from specgen.engine.serving import prefill_graphs as graphs_module

    model, _ = tiny
    monkeypatch.setattr(graphs_module, "BUCKETS", (16,))
    monkeypatch.setattr(prefill_module, "_eager", lambda *a, **k: pytest.fail("a chunk ran eagerly"))
    pieces = []
    run_chunk = PrefillGraphs.run
    monkeypatch.setattr(
        PrefillGraphs,
        "run",
        lambda self, s, t, *a, **k: pieces.append((s, len(t), a[2])) or run_chunk(self, s, t, *a, **k),
    )
    reqs = workload(model, stops, 8, seed=83, rate=None)
    pair = (model, draft_kind(draft).create(model, seed=1)) if draft != "mtp" else tiny
    lib = block_kernels if draft != "mtp" else engine_kernels
    kw = dict(read_lag=1, acceptance=oracle_mix(model, reqs, 0.7, 4), complete_lag=1, num_blocks=9)
    check = Checks if draft == "mtp" else ContextChecks
    loop, run, checks = serve(pair, lib, "specgen", reqs, check=check, max_prefill_tokens=40, prefill_graphs=True, **kw)
    assert_exact(model, loop, run, reqs)
    assert run.settings["prefill_graphs"] == [16] and checks.iterations > 0
    assert max(n for _, n, _ in pieces) == 16 and loop.prefill_graphs.replays == len(pieces) > run.prefill_chunks
    # a chunk's pieces are consecutive: every mid piece of 16 rows is followed by the next at its end
    follows = [(a, b) for a, b in zip(pieces, pieces[1:]) if a[2] == "mid" and a[1] == 16 and b[0] == a[0] + 16]
    assert follows and sum(k == "join" for _, _, k in pieces) >= len(reqs)


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
