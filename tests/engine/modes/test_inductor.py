"""The inductor mode: specgen's captured pipeline with the families as compiled torch semantics, lossless."""

from __future__ import annotations

import random

import pytest
import torch

from specgen.engine import MODES, SpecDecodeEngine, greedy_generate
from specgen.engine.modes import SpecgenMode
from specgen.engine.modes.inductor import CompiledSemanticsLibrary, InductorMode
from specgen.models import MTPHead, Qwen3Model

BT, BS, NEW = 8, 16, 10  # the engine_kernels layout (tests/conftest.py)


def _prompts(batch: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(512) for _ in range(rng.randint(1, 10))] for _ in range(batch)]


def test_registered_after_the_others():
    assert list(MODES)[-1] == "inductor" and MODES["inductor"] is InductorMode
    assert issubclass(InductorMode, SpecgenMode) and InductorMode.needs_library
    assert InductorMode.cpu_skip_reason  # the bench skips it on the CPU, like compile


@pytest.mark.parametrize("width,batch", [(2, 1), (4, 3), (6, 2)])
def test_lossless_on_the_fast_path(tiny, engine_kernels, width, batch):
    """Equal to plain greedy decoding, every step on the runtime's fast path, no artifact loaded."""
    model, head = tiny
    prompts = _prompts(batch, seed=width * 7 + batch)
    eng = SpecDecodeEngine(
        model,
        head,
        mode="inductor",
        width=width,
        batch=batch,
        block_size=BS,
        block_table_width=BT,
        library=engine_kernels,
        compile_backend="eager",
    )
    loaded = dict(engine_kernels._launchers)  # other tests may have loaded artifacts already
    res = eng.run(prompts, max_new_tokens=NEW)
    assert res.outputs == greedy_generate(model, prompts, NEW)
    stats = res.runtime_stats
    assert stats["fallback"] == {} and stats["fast_path"] >= 1, stats
    lib = eng.strategy.runtime.library
    assert isinstance(lib, CompiledSemanticsLibrary)
    assert lib._launchers and all(type(x).__name__ == "_CompiledLauncher" for x in lib._launchers.values())
    assert engine_kernels._launchers == loaded  # no generated artifact was loaded for this run


@pytest.mark.gpu
def test_cuda_inductor_mode_lossless(engine_kernels):
    """On the GPU in float32: equal to greedy and to specgen mode, no host synchronization per step."""
    torch.backends.cuda.matmul.allow_tf32 = False
    m = Qwen3Model.create("tiny", seed=0, device="cuda")
    head = MTPHead.create(m, seed=1)
    for batch in (1, 3, 8):
        prompts = _prompts(batch, seed=batch)
        eng = SpecDecodeEngine(
            m, head, mode="inductor", width=4, batch=batch, block_size=BS, block_table_width=BT, library=engine_kernels
        )
        assert eng.run(prompts, max_new_tokens=NEW).outputs == greedy_generate(m, prompts, NEW)
        timed = eng.run(prompts, steps=3, warmup_steps=1, timing=True)
        assert [t.host_syncs for t in timed.timings] == [0, 0, 0]
        assert timed.runtime_stats["fallback"] == {}
