"""The serving loop over the tiny target (float32, CPU): every request's output is plain greedy decoding of
its prompt alone, cut at its stop token or its budget, in every CPU mode, with random arrivals and lengths,
frequent stop tokens, a pool small enough to preempt, and the lagged block release.

After every iteration the KV caches (target and MTP head) are unchanged outside the blocks of the requests
the iteration ran (and the scratch block), and no block of a step still in flight is handed to another
request.
"""

from __future__ import annotations

import pytest
import torch
from oracles.serving import frequent_tokens
from oracles.serving_loop import (
    BS,
    BT,
    Checks,
    ContextChecks,
    assert_exact,
    oracle_mix,
    serve,
    workload,
)

from specgen.engine import AcceptanceMix
from specgen.engine.serving import ClosedLoop, LengthDist, Workload
from specgen.engine.serving import loop as loop_module
from specgen.engine.serving.loop import ServingLoop
from specgen.engine.serving.rows import remap_rows, row_layout
from specgen.models.errors import EngineError
from specgen.runtime.buffers import bucket_of


@pytest.fixture(scope="module")
def stops(tiny):
    """Two token ids the tiny model's greedy decoding emits often: frequent stop tokens."""
    model, _ = tiny
    return frequent_tokens(model)


@pytest.mark.parametrize("mode", ["baseline", "specgen"])
@pytest.mark.parametrize("lag", [0, 1])
def test_outputs_are_greedy(tiny, engine_kernels, stops, mode, lag):
    """Random arrivals and lengths, stop tokens the model emits, a 9-block pool: preemptions happen; 100
    requests over up to 6 rows, so the batch changes bucket (1, 2, 4, 6) as well as rows within one."""
    model, _ = tiny
    reqs = workload(model, stops, 100, seed=11 + lag, rate=60.0)
    loop, run, checks = serve(tiny, engine_kernels, mode, reqs, check=True, complete_lag=lag, max_batch=6)
    assert_exact(model, loop, run, reqs)
    assert run.preemptions > 0 and checks.iterations > 0
    assert {r.finish for r in run.requests} == {"stop", "length"}
    assert sum(s.remaps for s in run.steps) > 0 and sum(s.joined for s in run.steps) >= len(reqs)
    m = run.metrics()
    if mode == "specgen":
        assert all(s.fast_path and s.reason is None and s.bucket >= s.batch for s in run.steps)
        assert m["fast_path_steps"] == m["decode_steps"] and m["fallbacks"] == {}
        buckets = [s.bucket for s in run.steps]
        assert len(set(buckets)) == 4 and any(a != b for a, b in zip(buckets, buckets[1:]))
    assert m["finished"] == len(reqs) and m["preemptions"] == run.preemptions


@pytest.mark.parametrize("mode", ["baseline", "specgen"])
def test_acceptance_mix(tiny, engine_kernels, stops, mode):
    """Drafts that agree with the target (p = 0.8): several tokens per step, cut at stops and budgets."""
    model, _ = tiny
    reqs = workload(model, stops, 30, seed=5)
    mix = oracle_mix(model, reqs, 0.8, 6)
    loop, run, checks = serve(
        tiny, engine_kernels, mode, reqs, depth=5, acceptance=mix, num_blocks=12, max_batch=6, check=KeptInputs
    )
    assert_exact(model, loop, run, reqs)
    assert run.metrics()["acceptance"] > 0.5
    assert max(s.tokens for s in run.steps) > max(s.batch for s in run.steps)
    assert len(checks.kept) > 1  # several row counts, each with its own tensors throughout


class KeptInputs(Checks):
    """What the draft reads besides the step buffers (the prompt lengths, the AcceptanceMix rows) stays the
    same tensors per row count from step to step, refilled in place: a captured draft reads those it saw."""

    def after_step(self, loop, out):
        super().after_step(loop, out)
        if not out.verify:
            return
        e = loop.engine
        rows = e.prompt_lens.shape[0]
        seen = (e.prompt_lens.data_ptr(), e.acceptance.oracle.data_ptr(), e.acceptance.hit.data_ptr())
        self.kept = getattr(self, "kept", {})
        assert self.kept.setdefault(rows, seen) == seen, rows
        ids = list(out.verify)
        assert e.prompt_lens[: len(ids)].tolist() == [len(loop.requests[r].prompt) for r in ids]
        assert torch.equal(e.acceptance.oracle[: len(ids)], loop.acceptance.oracle[ids])


@pytest.mark.parametrize("mode", ["baseline", "specgen"])
def test_closed_loop_and_depths(tiny, engine_kernels, stops, mode):
    """A closed loop (a new request when one finishes), depths 1 and 2 (tokens read one step late), a large
    prefill budget."""
    model, _ = tiny
    for depth, seed, read_lag in ((1, 21, 0), (2, 22, 1)):
        wl = Workload(
            num_requests=24,
            prompt_len=LengthDist.uniform(1, 20),
            output_len=LengthDist.uniform(1, 20),
            vocab=model.config.vocab_size,
            seed=seed,
        )
        source = ClosedLoop(wl, in_flight=5)
        kw = dict(depth=depth, max_batch=5, max_prefill_tokens=64, read_lag=read_lag)
        loop, run, _ = serve(tiny, engine_kernels, mode, source, **kw)
        reqs = list(loop.requests.values())
        assert len(reqs) == 24 and run.in_flight == 5
        assert_exact(model, loop, run, reqs)


@pytest.mark.parametrize(
    "kind, mode, lag, read_lag",
    [("dflash", "baseline", 1, 0), ("dflash", "specgen", 0, 1), ("dspark", "specgen", 1, 1)],
)
def test_block_drafts(tiny, block_kernels, stops, kind, mode, lag, read_lag):
    """DFlash / DSpark at depth 3: their context K/V written by the chunked prefill, the next block's inputs
    moved with the rows; outputs greedy, KV isolated (the draft's context cache too), preemptions; tokens read
    after each step or one step late."""
    from specgen.engine.draft_kinds import draft_kind

    model, _ = tiny
    reqs = workload(model, stops, 30, seed=41 + lag, rate=80.0)
    mix = oracle_mix(model, reqs, 0.8, 4)
    draft = draft_kind(kind).create(model, seed=1)
    loop, run, checks = serve(
        (model, draft),
        block_kernels,
        mode,
        reqs,
        check=ContextChecks,
        complete_lag=lag,
        read_lag=read_lag,
        acceptance=mix,
        num_blocks=7,
    )
    assert_exact(model, loop, run, reqs)
    assert not loop.engine.strategy.trails_draft  # the loop drafts before each step, over that step's rows
    assert (
        run.draft == kind
        and run.settings["read_lag"] == read_lag
        and run.preemptions > 0
        and checks.iterations > 0
        and checks.checked > 0
    )
    assert run.metrics()["acceptance"] > 0.5 and sum(s.remaps for s in run.steps) > 0
    if mode == "specgen":
        assert all(s.fast_path and s.reason is None for s in run.steps)


def test_idle_time_is_skipped(tiny, stops):
    """Arrivals far apart: the clock jumps to the next one instead of sleeping."""
    model, _ = tiny
    reqs = workload(model, stops, 4, seed=2, rate=0.01)  # about 100 s apart
    loop, run, _ = serve(tiny, None, "baseline", reqs)
    assert_exact(model, loop, run, reqs)
    assert run.elapsed_s > reqs[-1].arrival > 10
    assert all(rec.ttft < 5 for rec in run.requests)


def test_remap_rows():
    """Rows move with their state; hidden_rows point at the moved verify rows; -1 rows are left alone."""
    W = 3
    layout = row_layout(W, BT, BS)
    assert {"tokens", "accepted", "next_seq_lens", "hidden_rows", "block_table", "draft_slots"} <= set(layout)
    assert layout["tokens"] == W and layout["accepted"] == 1 and "query_start_loc" not in layout
    src = {
        n: torch.arange(4 * k * (1 if n != "block_table" else BT)).view(4 * k, -1).squeeze(-1)
        for n, k in layout.items()
    }
    src["hidden_rows"] = (torch.arange(4) * W)[:, None].repeat(1, 2) + torch.tensor([0, 1])
    dst = {n: torch.full_like(t, -7) for n, t in src.items()}
    remap_rows(dst, src, layout, [2, -1, 0], W)
    assert dst["accepted"][:3].tolist() == [2, -7, 0]
    assert dst["tokens"][:3].tolist() == src["tokens"][2 * W : 3 * W].tolist()
    assert dst["hidden_rows"][:3].tolist() == [[0, 1], [-7, -7], [2 * W, 2 * W + 1]]
    same = {n: t.clone() for n, t in src.items()}
    remap_rows(same, same, layout, [1, 0], W)  # in place: a swap
    assert same["accepted"][:2].tolist() == [1, 0] and same["hidden_rows"][0].tolist() == [0, 1]


class ForgetHostBonus(Checks):
    """Before every step the host's copy of each joining request's prefill token is overwritten: a first step
    primed on the device from the prefill never reads it."""

    def before_step(self, loop, out):
        super().before_step(loop, out)
        for j in loop.rows.joined.values():
            j.bonus = -12345
        self.forgot = getattr(self, "forgot", 0) + len(loop.rows.joined)


@pytest.mark.parametrize("read_lag", [0, 1])
def test_first_step_is_primed_on_the_device(tiny, engine_kernels, stops, read_lag):
    """``specgen``: a joining request's first step takes the bonus token, the last prefix token, the length and
    the hidden state from where its prefill left them on the device (the row remap's held slot), not from the
    host's read of the prefill's token."""
    model, _ = tiny
    reqs = workload(model, stops, 30, seed=71 + read_lag, rate=80.0)
    loop, run, checks = serve(tiny, engine_kernels, "specgen", reqs, check=ForgetHostBonus, read_lag=read_lag)
    assert_exact(model, loop, run, reqs)
    assert checks.forgot >= len(reqs) and sum(s.joined for s in run.steps) >= len(reqs)


def test_remap_without_the_built_variant(tiny, engine_kernels, stops, monkeypatch):
    """A kernel folder without ``spec_batch_row_remap`` (built before it existed): ``specgen`` moves the rows by
    the family's torch semantics and says why in every such step, outputs unchanged."""
    model, _ = tiny
    monkeypatch.setattr(loop_module, "remap_kernel", lambda loop: (None, "not_built"))
    reqs = workload(model, stops, 20, seed=81)
    loop, run, _ = serve(tiny, engine_kernels, "specgen", reqs, check=True)
    assert_exact(model, loop, run, reqs, why="not_built")
    assert run.metrics()["fast_path_steps"] == len(run.steps)  # the verify step itself stays on the fast path


def test_row_stage_runs_the_kernel_inside_its_guard(engine_kernels):
    """``RowStage.remap``: the built variant inside its guard, the torch semantics (and the reason) past it or
    without one; the rows it writes are the same either way."""
    from specgen.engine.serving.remap import OUTPUTS, RowStage
    from specgen.runtime.buffers import alloc_step_buffers

    W, max_batch = 4, 3
    kernel = engine_kernels.get("spec_batch_row_remap", W, BT, BS, target="c")
    stage = RowStage(max_batch, W, BT, BS, 0, torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    for name, hi in (("tokens", 50), ("accepted", W), ("next_last_token", 50), ("next_seq_lens", BT * BS - 1)):
        stage.src(name).copy_(torch.randint(0, hi, stage.src(name).shape, generator=g, dtype=torch.int32))
    table = torch.randint(1, 40, (4, BT), generator=g, dtype=torch.int32)
    rows = [2, 0, stage.row_of_slot(1), 1]  # a swap, a held slot, a row that stays
    written = []
    for k, bounds, why in (
        (kernel, (1, BT * BS - 1), None),
        (kernel, (1, BT * BS), "guard_failed"),
        (None, (1, 2), "mode"),
    ):
        stage.bufs["tokens"].fill_(-7)
        dst = alloc_step_buffers(4, W, BT, block_size=BS)
        assert stage.remap(rows, table, k, bounds, (None, 0, dst, 4, None)) == why
        written.append({n: stage.bufs[n].clone() for n in (*OUTPUTS, "hidden_src")})
        assert all(torch.equal(dst[n].view(-1), stage.bufs[n].view(-1)[: dst[n].numel()]) for n in OUTPUTS)
    for other in written[1:]:
        assert all(torch.equal(written[0][n], other[n]) for n in other)
    assert written[0]["tokens"][:W].tolist() == stage.src("tokens")[2 * W : 3 * W].tolist()
    assert written[0]["hidden_src"][2 * W : 3 * W].tolist() == [stage.row_of_slot(1) * W + j for j in range(W)]
    assert written[0]["draft_slots"][4:].eq(-1).all()  # rows past the step's: no source, no write
    # a transition's move as one "graph" per pair of buckets (captured on a GPU, run as it is on the CPU)
    dst = alloc_step_buffers(4, W, BT, block_size=BS)
    stage.capture({4: dst}, None, kernel, torch.device("cpu"))
    ran = []
    stage.graphs[(id(dst), id(dst))].fn = lambda: ran.append(stage.move(dst, 4, dst, 4, None, kernel))
    assert stage.remap(rows, table, kernel, (1, 2), (dst, 4, dst, 4, None)) is None and ran == [None]
    assert stage.remap(rows, table, kernel, (1, BT * BS), (dst, 4, dst, 4, None)) == "guard_failed" and len(ran) == 1


def test_refusals(tiny):
    model, head = tiny
    kw = dict(depth=3, max_batch=2, num_blocks=8)
    with pytest.raises(EngineError, match="runs modes baseline, compile, specgen, inductor, not 'fast'"):
        ServingLoop(model, head, mode="fast", **kw)
    with pytest.raises(EngineError, match="bind the AcceptanceMix"):
        ServingLoop(model, head, mode="baseline", acceptance=AcceptanceMix(0.5), **kw)
    with pytest.raises(EngineError, match="read_lag is 0"):
        ServingLoop(model, head, mode="baseline", read_lag=2, **kw)


@pytest.mark.parametrize("mode, read_lag", [("compile", 0), ("compile", 1), ("inductor", 1)])
def test_compiled_modes(tiny, engine_kernels, stops, mode, read_lag):
    """``compile`` and ``inductor`` on the CPU, their verify bodies run eagerly (``compile_backend="eager"``): under
    churn (preemptions, joins, rows that move, the lagged release, p = 0.7) every request's output equals its
    greedy decoding alone and the baseline loop's output for it; the rows move by the remap's torch semantics
    (``mode``); ``compile`` keeps no host copies and pads to the runtime's bucket sizes (a verify body per
    bucket), ``inductor`` runs the runtime's buckets on the fast path."""
    model, _ = tiny
    runs = {}
    for m in ("baseline", mode):
        reqs = workload(model, stops, 40, seed=71 + read_lag, rate=80.0)
        mix = oracle_mix(model, reqs, 0.7, 4)
        kw = dict(check=True, complete_lag=1, read_lag=read_lag, acceptance=mix, max_batch=6, num_blocks=9)
        loop, run, checks = serve(tiny, engine_kernels, m, reqs, **kw)
        assert_exact(model, loop, run, reqs)
        assert run.preemptions > 0 and checks.iterations > 0 and sum(s.remaps for s in run.steps) > 0
        runs[m] = loop, run
    (base, _), (loop, run) = runs["baseline"], runs[mode]
    assert {r: q.output for r, q in loop.requests.items()} == {r: q.output for r, q in base.requests.items()}
    assert run.metrics()["acceptance"] > 0
    if mode == "compile":
        # padded to the runtime's bucket sizes: a verify body per bucket, no host copies
        assert loop._host == {} and sorted(loop.row_graphs.graphs) == sorted(loop._dev) == [1, 2, 4, 6]
        assert all(s.fast_path and s.bucket == bucket_of((1, 2, 4, 6), s.batch) for s in run.steps)
        assert any(s.bucket > s.batch for s in run.steps)  # some step ran padding rows
    else:
        assert all(s.fast_path and s.reason is None and s.bucket >= s.batch for s in run.steps)
        assert "runtime_stats" in run.settings


class LagChecks(Checks):
    """Also counts what only a one-step-late read gives: a request run in a step after the one it finished in
    (that step's tokens dropped), a preemption and a join while a step is unread."""

    def __init__(self, loop: ServingLoop):
        super().__init__(loop)
        self.dropped = self.preempted = self.joined = self.prefilled = self.first_unread = 0

    def before_step(self, loop, out):
        super().before_step(loop, out)
        unread = loop.scheduler.unread
        self.prefilled += sum(c.last for c in out.prefill)
        self.preempted += len(set(out.preempted) & unread)
        self.first_unread += len(set(out.verify) & loop.scheduler.unread_first)  # joined before its token was read
        self.joined += len(set(out.verify) & set(loop.rows.joined)) if unread else 0

    def after_step(self, loop, out):
        super().after_step(loop, out)
        # step k read, step k + 1 (``out``) not: a request of step k + 1 finished already did so at step k
        self.dropped += sum(loop.requests[rid].finished for rid in out.verify)


@pytest.mark.parametrize("mode", ["baseline", "specgen"])
@pytest.mark.parametrize("complete_lag", [0, 1])
def test_read_lag(tiny, engine_kernels, stops, mode, complete_lag):
    """Tokens read one step late: step k + 1 is scheduled and launched before step k's tokens are known.
    Outputs stay greedy (a request that finished at step k ran in step k + 1: those tokens are dropped, its
    blocks held until step k + 1 completed), with preemptions and joins while a step is unread."""
    model, _ = tiny
    reqs = workload(model, stops, 30, seed=61 + 2 * complete_lag, rate=80.0)
    mix = oracle_mix(model, reqs, 0.7, 4)
    loop, run, checks = serve(
        tiny,
        engine_kernels,
        mode,
        reqs,
        check=LagChecks,
        read_lag=1,
        complete_lag=complete_lag,
        acceptance=mix,
        num_blocks=8,
    )
    assert_exact(model, loop, run, reqs)
    assert run.settings["read_lag"] == 1 and run.preemptions > 0
    assert checks.dropped > 0 and checks.preempted > 0 and checks.joined > 0, vars(checks)
    assert {r.finish for r in run.requests} == {"stop", "length"}
    # every token emitted once: one per finished prefill, the rest counted by the step that produced them
    assert sum(s.tokens for s in run.steps) + checks.prefilled == sum(r.output_len for r in run.requests)
    # outside baseline a prefill's token is read a step late as well: requests verify before it is known
    assert (checks.first_unread > 0) == (mode != "baseline") == loop.late_first
    if mode == "specgen":
        assert all(s.fast_path and s.reason is None for s in run.steps)


@pytest.mark.parametrize(
    "mode, read_lag, draft",
    [("baseline", 0, "mtp"), ("specgen", 1, "mtp"), ("compile", 1, "mtp"), ("specgen", 1, "dspark")],
)
def test_step_first(tiny, engine_kernels, block_kernels, stops, monkeypatch, mode, read_lag, draft):
    """``step_first``: each iteration launches its decode step before its prefill chunks.  Under churn
    (preemptions, joins, tokens read late, prefill tokens read late outside baseline) every output stays its
    greedy decoding alone, KV stays isolated, blocks are never handed on while a step that wrote them is in
    flight; and the order is as asked: in an iteration with both, the step came first."""
    from specgen.engine.draft_kinds import draft_kind
    from specgen.engine.serving import loop as loop_module

    model, head = tiny
    order: list[tuple[str, int]] = []
    step = loop_module.decode_step
    monkeypatch.setattr(
        loop_module,
        "decode_step",
        lambda loop, out, unread: order.append(("step", out.step)) or step(loop, out, unread),
    )
    prefill = loop_module.prefill_chunk
    monkeypatch.setattr(
        loop_module,
        "prefill_chunk",
        lambda loop, req, chunk, bt: order.append(("prefill", loop.scheduler.step)) or prefill(loop, req, chunk, bt),
    )
    reqs = workload(model, stops, 40, seed=91 + read_lag, rate=80.0)
    mix = oracle_mix(model, reqs, 0.7, 4)
    pair = (model, draft_kind(draft).create(model, seed=1)) if draft != "mtp" else tiny
    lib = block_kernels if draft != "mtp" else engine_kernels
    kw = dict(read_lag=read_lag, acceptance=mix, complete_lag=1, num_blocks=9, step_first=True)
    loop, run, checks = serve(pair, lib, mode, reqs, check=Checks if draft == "mtp" else ContextChecks, **kw)
    assert_exact(model, loop, run, reqs)
    assert run.settings["step_first"] and run.preemptions > 0 and checks.iterations > 0
    assert sum(s.joined for s in run.steps) >= len(reqs) and sum(s.remaps for s in run.steps) > 0
    both = {s for kind, s in order if kind == "step"} & {s for kind, s in order if kind == "prefill"}
    assert both  # iterations with a step and prefill chunks
    for s in both:
        first = next(kind for kind, t in order if t == s)
        assert first == "step", f"iteration {s} ran a prefill chunk before its step"
    if mode != "baseline":
        assert all(s.fast_path and s.reason is None for s in run.steps)
