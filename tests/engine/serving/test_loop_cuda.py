"""The serving loop on the GPU: the tiny target in float32 (TF32 off) with CUDA graphs, under churn.

Every request's output equals plain greedy decoding of its prompt alone, cut at its stop token or budget, in
every mode (``compile`` and ``inductor`` also equal to ``baseline``'s);
``specgen`` moves the rows by the ``cuda`` variant of ``spec_batch_row_remap`` and no ``specgen`` decode step
synchronizes the host (the row remap, the uploads and the launch counted by torch.cuda's sync debug mode; the
read-back of the step's tokens excluded); every bucket's graph is captured before the first step.  A soak
serves thousands of requests with the device memory flat.

Kernels: SPECGEN_TEST_ENGINE_KERNELS, a build with ``--target c,cuda`` of the engine layout, which holds the
remap family (built beside the verify-to-draft plan)::

    specgen build --target c,cuda --arch sm_90 --widths 2-6 --block-table-widths 8 --block-sizes 16 \\
        --draft-dtypes int32 --boundary draft-to-verify,verify-to-draft --out build/engine_test_kernels

``SPECGEN_SERVE_SOAK_REQUESTS`` sets the soak's requests (default 2000).
"""

from __future__ import annotations

import os

import pytest
import torch
from oracles.serving import churn_requests, cut_at_stop, frequent_tokens

from specgen.engine import AcceptanceMix, greedy_generate
from specgen.engine.serving import ClosedLoop, LengthDist, Workload
from specgen.engine.serving.loop import ServingLoop
from specgen.models import MTPHead, Qwen3Model
from specgen.runtime.buffers import bucket_of, buckets_for

pytestmark = pytest.mark.gpu

BT, BS = 8, 16


@pytest.fixture(scope="module")
def cuda_tiny():
    torch.backends.cuda.matmul.allow_tf32 = False
    m = Qwen3Model.create("tiny", seed=0, device="cuda")
    return m, MTPHead.create(m, seed=1)


@pytest.fixture(scope="module")
def cuda_stops(cuda_tiny):
    model, _ = cuda_tiny
    return frequent_tokens(model)


def _requests(model, stops, n: int, seed: int, rate: float | None = 80.0):
    return churn_requests(model, stops, n, seed, rate)


_greedy: dict = {}


def _expected(model, req) -> list[int]:
    key = (req.prompt, req.max_new_tokens)
    if key not in _greedy:
        _greedy[key] = greedy_generate(model, [list(req.prompt)], max(req.max_new_tokens, 1))[0]
    return cut_at_stop(_greedy[key][: req.max_new_tokens], req.stop_ids)


def _loop(model, head, lib, mode, **kw) -> ServingLoop:
    return ServingLoop(
        model,
        head,
        mode=mode,
        depth=3,
        max_batch=kw.pop("max_batch", 6),
        num_blocks=kw.pop("num_blocks", 10),
        block_size=BS,
        block_table_width=BT,
        max_prefill_tokens=16,
        kernels=lib if mode in ("specgen", "inductor") else None,
        **kw,
    )


@pytest.mark.parametrize("read_lag, step_first", [(0, False), (1, False), (1, True)])
def test_cuda_churn_is_exact_and_specgen_never_syncs(cuda_tiny, cuda_stops, engine_kernels, read_lag, step_first):
    model, head = cuda_tiny
    # every request at once: the batch saturates whatever the GPU's speed, so the preemptions and bucket changes
    # asserted below happen on any machine (Poisson arrivals at a rate make them depend on how fast steps run)
    reqs = _requests(model, cuda_stops, 80, seed=101 + read_lag, rate=None)
    g = max(r.max_new_tokens for r in reqs) + 2 * 4 + 1  # W = 4, one step unread
    oracle = [greedy_generate(model, [list(r.prompt)], g)[0] for r in reqs]
    rows = [cut_at_stop(o[: r.max_new_tokens], r.stop_ids) for o, r in zip(oracle, reqs)]
    mix = AcceptanceMix(0.7, torch.tensor(oracle, device="cuda"), vocab_size=model.config.vocab_size, seed=3)
    for mode in ("baseline", "specgen"):
        reqs = _requests(model, cuda_stops, 80, seed=101 + read_lag, rate=None)  # fresh: a run appends to them
        kw = dict(acceptance=mix, complete_lag=1, read_lag=read_lag, step_first=step_first)
        loop = _loop(model, head, engine_kernels, mode, **kw)
        run = loop.run(reqs)
        for r, want in zip(reqs, rows):
            assert loop.requests[r.id].output == want, f"{mode}: request {r.id}"
        m = run.metrics()
        assert m["finished"] == len(reqs), f"{mode}: {m['finished']} of {len(reqs)} finished"
        assert run.preemptions > 0, f"{mode}: no preemption"
        t = m["transitions"]
        assert t["steps"] > 0, f"{mode}: no row moved"
        # every chunk (16 tokens at most) replayed the prefill graph captured at set-up
        assert run.settings["prefill_graphs"] == [16] and loop.prefill_graphs.replays == run.prefill_chunks > 0
        if mode == "specgen":
            assert all(s.fast_path and s.reason is None for s in run.steps), m["fallbacks"]
            assert all(s.host_syncs == 0 for s in run.steps), [s.host_syncs for s in run.steps if s.host_syncs]
            assert m["host_syncs_per_step"] == 0 and m["fast_path_steps"] == m["decode_steps"]
            assert t["kernel"] == t["steps"] and t["torch"] == {}
            assert "target=cuda" in repr(loop.rows.kernel)
            buckets = [s.bucket for s in run.steps]
            assert len(set(buckets)) > 1  # the batch changed bucket and stayed on the captured graphs
            # a prefill's token read a step late costs no synchronization; read at once, one per last chunk
            syncs = m["host_syncs_per_prefill"]
            assert syncs == 0 if read_lag else syncs > 0, f"{syncs} host syncs per prefill chunk"
        else:
            assert t["torch"] == {"mode": t["steps"]}


@pytest.mark.parametrize("mode, read_lag", [("compile", 0), ("compile", 1), ("inductor", 0), ("inductor", 1)])
def test_cuda_compiled_modes_equal_baseline(cuda_tiny, cuda_stops, engine_kernels, mode, read_lag):
    """``compile`` (its verify graph captured per bucket at set-up, steps padded to it) and ``inductor``
    (the runtime's buckets, each captured at set-up, the families as Inductor-compiled torch) under the same
    churn as above: every request's output equals the baseline loop's and greedy decoding's, the rows move by
    the remap's torch semantics."""
    model, head = cuda_tiny
    g = None
    outputs = {}
    for m in ("baseline", mode):
        # fresh: a run appends to its requests; all at once, so the batch saturates (preempts) at any speed
        reqs = _requests(model, cuda_stops, 60, seed=131 + read_lag, rate=None)
        if g is None:
            g = max(r.max_new_tokens for r in reqs) + 2 * 4 + 1  # W = 4, one step unread
            oracle = [greedy_generate(model, [list(r.prompt)], g)[0] for r in reqs]
            rows = [cut_at_stop(o[: r.max_new_tokens], r.stop_ids) for o, r in zip(oracle, reqs)]
            mix = AcceptanceMix(0.7, torch.tensor(oracle, device="cuda"), vocab_size=model.config.vocab_size, seed=3)
        loop = _loop(model, head, engine_kernels, m, acceptance=mix, complete_lag=1, read_lag=read_lag)
        run = loop.run(reqs)
        if m == "baseline":  # a graph per row count, all captured before the run's clock started
            assert sorted(loop.row_graphs.graphs) == list(range(1, loop.max_batch + 1))
        outputs[m] = {r.id: loop.requests[r.id].output for r in reqs}
        for r, want in zip(reqs, rows):
            assert outputs[m][r.id] == want, f"{m}: request {r.id}"
        metrics = run.metrics()
        assert metrics["finished"] == len(reqs) and run.preemptions > 0
        t = metrics["transitions"]
        assert t["steps"] > 0 and t["torch"] == {"mode": t["steps"]}
    assert outputs[mode] == outputs["baseline"]
    if mode == "compile":
        assert loop._host == {} and sorted(loop.row_graphs.graphs) == sorted(loop._dev)
        assert sorted(loop._dev) == list(buckets_for(loop.max_batch))  # every bucket, captured at set-up
        assert all(s.bucket == bucket_of(buckets_for(loop.max_batch), s.batch) for s in run.steps)
    else:
        assert all(s.fast_path and s.reason is None for s in run.steps), metrics["fallbacks"]
        assert len({s.bucket for s in run.steps}) > 1  # the batch changed bucket and stayed on the captured graphs


def test_cuda_serving_soak(cuda_tiny, engine_kernels):
    """Thousands of requests in a closed loop of 8 (short outputs, many joins and leaves): every specgen step
    on the fast path with 0 host syncs, outputs exact (every 10th request checked against greedy), and the
    device memory allocated flat over the run's second half."""
    model, head = cuda_tiny
    n = int(os.environ.get("SPECGEN_SERVE_SOAK_REQUESTS", "2000"))
    wl = Workload(
        num_requests=n,
        prompt_len=LengthDist.uniform(1, 16),
        output_len=LengthDist.uniform(1, 12),
        vocab=model.config.vocab_size,
        seed=5,
    )
    loop = _loop(model, head, engine_kernels, "specgen", max_batch=8, num_blocks=40, read_lag=1)

    class Memory:
        def __init__(self):
            self.samples = []

        def before_step(self, loop, out):
            pass

        def after_step(self, loop, out):
            if out.step % 50 == 0:
                self.samples.append(torch.cuda.memory_allocated())

    loop.observer = mem = Memory()
    run = loop.run(ClosedLoop(wl, in_flight=8))
    m = run.metrics()
    assert m["finished"] == n and m["fast_path_steps"] == m["decode_steps"] and m["host_syncs_per_step"] == 0
    assert m["transitions"]["kernel"] == m["transitions"]["steps"] >= n // 10
    late = mem.samples[len(mem.samples) // 2 :]
    assert max(late) - min(late) <= 1 << 20, late  # flat: nothing grows with the requests served
    for req in list(loop.requests.values())[::10]:
        assert req.output == _expected(model, req), f"request {req.id}"
    print(f"cuda serving soak: {n} requests, {m['decode_steps']} steps, {m['transitions']['steps']} transitions")
