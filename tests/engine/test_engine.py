"""The decode engine: every mode emits exactly plain greedy decoding's tokens."""

from __future__ import annotations

import random

import pytest
import torch

from specgen.engine import AcceptanceMix, SpecDecodeEngine, greedy_generate
from specgen.models import EngineError, MTPHead, Qwen3Model

ENGINE_LAYOUT = {
    "widths": (2, 3, 4, 5, 6),
    "block_table_width": 8,
    "block_size": 16,
}  # as conftest.engine_kernels builds

BT, BS = ENGINE_LAYOUT["block_table_width"], ENGINE_LAYOUT["block_size"]
NEW = 12


@pytest.fixture(scope="module")
def model():
    m = Qwen3Model.create("tiny", seed=0)
    return m, MTPHead.create(m, seed=1)


def prompts_for(batch: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    lens = [1] + [rng.randint(2, 12) for _ in range(batch - 1)]  # a one-token prompt is an edge
    rng.shuffle(lens)
    return [[rng.randrange(512) for _ in range(n)] for n in lens]


_GREEDY: dict = {}


def greedy(model, prompts, n=NEW):
    key = (tuple(map(tuple, prompts)), n)
    if key not in _GREEDY:
        _GREEDY[key] = greedy_generate(model, prompts, n)
    return _GREEDY[key]


def engine(model, lib, mode, width, batch, **kw):
    m, head = model
    return SpecDecodeEngine(
        m,
        head,
        mode=mode,
        width=width,
        batch=batch,
        block_size=BS,
        block_table_width=BT,
        library=lib,
        compile_backend="eager",
        **kw,
    )


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["baseline", "specgen"])
@pytest.mark.parametrize("width", [2, 3, 4, 5, 6])
@pytest.mark.parametrize("batch", range(1, 9))
def test_lossless_with_mtp_head(model, engine_kernels, mode, width, batch):
    prompts = prompts_for(batch, seed=width * 10 + batch)
    res = engine(model, engine_kernels, mode, width, batch).run(prompts, max_new_tokens=NEW)
    assert res.outputs == greedy(model[0], prompts)
    if mode == "specgen":  # every step took the built kernels, none fell back
        assert res.runtime_stats["fallback"] == {} and res.runtime_stats["fast_path"] >= 1


@pytest.mark.slow
@pytest.mark.parametrize("width", [2, 4, 6])
def test_compile_mode_lossless(model, engine_kernels, width):
    prompts = prompts_for(3, seed=width)
    res = engine(model, engine_kernels, "compile", width, 3).run(prompts, max_new_tokens=NEW)
    assert res.outputs == greedy(model[0], prompts)


@pytest.mark.slow
@pytest.mark.parametrize("p", [0.0, 0.6, 1.0])
def test_acceptance_control(model, engine_kernels, p):
    batch, width = 4, 4
    prompts = prompts_for(batch, seed=7)
    oracle = torch.tensor(greedy(model[0], prompts, NEW + 3 * width))
    results = {}
    for mode in ("baseline", "specgen"):
        mix = AcceptanceMix(p, oracle, model[0].config.vocab_size, seed=5)
        res = engine(model, engine_kernels, mode, width, batch, acceptance=mix).run(prompts, max_new_tokens=NEW)
        assert res.outputs == greedy(model[0], prompts)
        results[mode] = res
    # both modes see the same drafts, so the same acceptance
    assert results["baseline"].acceptance == results["specgen"].acceptance
    acc = results["baseline"].acceptance
    if p == 1.0:
        assert acc == 1.0
    elif p == 0.0:
        assert acc == 0.0
    else:
        assert 0.0 < acc < 1.0


@pytest.mark.slow
def test_fixed_steps_and_timing_fields(model, engine_kernels):
    res = engine(model, engine_kernels, "specgen", 4, 2).run(prompts_for(2, 3), steps=4, warmup_steps=1, timing=True)
    assert res.steps == 4 and len(res.timings) == 4
    assert all(t.draft_us > 0 and t.verify_span_us > 0 for t in res.timings)
    assert res.timed_tokens >= 2 * 4  # at least the bonus token per sequence per step
    assert all(len(o) >= 1 + 5 for o in res.outputs)


@pytest.mark.parametrize("mode", ["baseline", "specgen"])
def test_the_draft_runs_once_per_step(model, engine_kernels, mode, monkeypatch):
    """specgen runs the draft inside its step graph (the runtime's prologue), the others as the draft graph:
    either way once per step, and the tokens stay greedy decoding's."""
    from specgen.engine.proposers import MTPProposer

    calls = []
    original = MTPProposer.propose
    monkeypatch.setattr(MTPProposer, "propose", lambda self: (calls.append(1), original(self))[1])
    prompts = prompts_for(2, seed=5)
    res = engine(model, engine_kernels, mode, 4, 2).run(prompts, steps=5)
    assert res.fused_draft is (mode == "specgen") and res.steps == 5
    assert len(calls) == 5
    assert res.outputs == [g[: len(o)] for o, g in zip(res.outputs, greedy(model[0], prompts, 30))]


def test_engine_errors(model, engine_kernels):
    with pytest.raises(EngineError, match="unknown mode"):
        engine(model, engine_kernels, "fast", 4, 1)
    with pytest.raises(EngineError, match="needs a kernel library"):
        SpecDecodeEngine(*model, mode="specgen", width=4, batch=1)
    with pytest.raises(EngineError, match="batch 2, got 3 prompts"):
        engine(model, engine_kernels, "baseline", 4, 2).run(prompts_for(3, 1), max_new_tokens=4)
    with pytest.raises(EngineError, match="block table holds"):
        engine(model, engine_kernels, "baseline", 4, 1).run([[1] * 100], max_new_tokens=60)
    with pytest.raises(EngineError, match="exactly one of"):
        engine(model, engine_kernels, "baseline", 4, 1).run([[1]], max_new_tokens=4, steps=2)
    with pytest.raises(EngineError, match=r"w7_bt8_bs16"):  # no variant built for width 7
        engine(model, engine_kernels, "specgen", 7, 1).run([[1, 2]], max_new_tokens=4)
    with pytest.raises(EngineError, match=r"\[0, 1\]"):
        AcceptanceMix(1.5, torch.zeros(1, 4, dtype=torch.long), 512)


@pytest.mark.gpu
@pytest.mark.parametrize("width", [2, 3, 4, 5, 6])
def test_cuda_modes_lossless(engine_kernels, width):
    """On the GPU in float32 without TF32: every mode equals greedy; specgen steps never synchronize."""
    torch.backends.cuda.matmul.allow_tf32 = False
    m = Qwen3Model.create("tiny", seed=0, device="cuda")
    head = MTPHead.create(m, seed=1)
    modes = ["baseline", "specgen"] + (["compile"] if width == 4 else [])
    for batch in (1, 3, 8):
        prompts = prompts_for(batch, seed=width * 10 + batch)
        exp = greedy_generate(m, prompts, NEW)
        oracle = torch.tensor(greedy_generate(m, prompts, NEW + 3 * width), device="cuda")
        for mode in modes:
            mix = AcceptanceMix(0.7, oracle, m.config.vocab_size, seed=1)
            eng = SpecDecodeEngine(
                m,
                head,
                mode=mode,
                width=width,
                batch=batch,
                block_size=BS,
                block_table_width=BT,
                library=engine_kernels,
                acceptance=mix,
            )
            res = eng.run(prompts, max_new_tokens=NEW)
            assert res.outputs == exp, (mode, width, batch)
            timed = eng.run(prompts, steps=3, warmup_steps=1, timing=True)
            syncs = [t.host_syncs for t in timed.timings]
            least = {"baseline": 2, "compile": 1, "specgen": 0}[mode]
            assert min(syncs) >= least, (mode, syncs)
            if mode == "specgen":
                assert syncs == [0, 0, 0], syncs


@pytest.mark.slow
def test_capture_warmup_leaves_state_alone(model, engine_kernels, monkeypatch):
    """Capturing runs each graph during warm-up; a compile-mode verify graph then writes the next
    draft's inputs.  The engine restores them, so the first step still starts from the prefill."""
    from specgen.engine import engine as eng_mod

    class WarmingGraph(eng_mod.CapturedGraph):
        def __init__(self, fn, device, pool=None, warmup=2):
            super().__init__(fn, device, pool, warmup)
            for _ in range(warmup):  # what capture does on CUDA
                fn()

    monkeypatch.setattr(eng_mod, "CapturedGraph", WarmingGraph)
    prompts = prompts_for(3, seed=21)
    for mode in ("compile", "baseline"):
        res = engine(model, engine_kernels, mode, 4, 3).run(prompts, max_new_tokens=NEW)
        assert res.outputs == greedy(model[0], prompts), mode


@pytest.mark.parametrize("mode", ["baseline", "specgen"])
def test_forward_writes_target_tokens_in_place(model, engine_kernels, mode, monkeypatch):
    """The target's greedy tokens go straight into the step's int32 ``target_tokens`` (no int64 result and
    casting copy after the forward), and the decode stays greedy decoding's."""
    from specgen.engine.proposers import MTPProposer

    seen = []
    original = MTPProposer.target_forward

    def spy(self, bufs):
        out = original(self, bufs)
        seen.append(out.data_ptr() == bufs["target_tokens"].data_ptr() and out.dtype == torch.int32)
        return out

    monkeypatch.setattr(MTPProposer, "target_forward", spy)
    prompts = prompts_for(3, seed=9)
    res = engine(model, engine_kernels, mode, 4, 3).run(prompts, steps=4)
    assert seen and all(seen)
    assert res.outputs == [g[: len(o)] for o, g in zip(res.outputs, greedy(model[0], prompts, 30))]


@pytest.mark.parametrize("mode", ["baseline", "specgen"])
def test_the_cache_holds_what_the_run_reaches(model, engine_kernels, mode):
    """The KV cache has the blocks a sequence can reach, not the whole table; the table's entries past them
    repeat the row's last block; the tokens stay greedy decoding's; close() drops both caches."""
    m, head = model
    prompts = prompts_for(3, seed=7)
    eng = engine(model, engine_kernels, mode, 4, 3)
    res = eng.run(prompts, steps=3)
    need = max(map(len, prompts)) + (3 + 2) * 4 + 1  # the longest prompt and the run's horizon (3 steps, W = 4)
    per_seq = -(-need // BS)
    assert m.kv_cache.num_blocks == head.kv_cache.num_blocks == 1 + 3 * per_seq < 1 + 3 * BT
    owned = eng.block_table[:, :per_seq]
    assert owned.unique().numel() == owned.numel() and int(owned.min()) >= 1  # distinct, never the scratch block
    assert bool((eng.block_table[:, per_seq:] == owned[:, -1:]).all())
    assert res.outputs == [g[: len(o)] for o, g in zip(res.outputs, greedy(m, prompts, 40))]
    eng.close()
    assert m.kv_cache is None and head.kv_cache is None
