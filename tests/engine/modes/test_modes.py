"""The mode registry: every mode is one registered class, and a new one runs without touching the engine."""

from __future__ import annotations

import random

import pytest

from specgen.engine import MODES, SpecDecodeEngine, greedy_generate, register_mode
from specgen.engine.graphs import head_update, verify_tail
from specgen.engine.modes import BaselineMode, CompileMode, Mode
from specgen.models.errors import EngineError


def test_registry_names_its_classes():
    assert list(MODES) == ["baseline", "compile", "specgen", "inductor"]
    for name, cls in MODES.items():
        assert issubclass(cls, Mode) and cls.name == name
    with pytest.raises(EngineError, match="taken"):
        register_mode(type("Again", (BaselineMode,), {"name": "baseline"}))


def _prompts(batch: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(512) for _ in range(rng.randint(1, 10))] for _ in range(batch)]


@pytest.mark.parametrize("base", [BaselineMode, CompileMode])
def test_a_new_mode_is_one_class(tiny, base):
    """A mode registered from outside the engine decodes exactly greedy decoding's tokens on the CPU."""

    class EagerDeviceMode(CompileMode):
        """The compile mode's device-side boundary as plain torch (no torch.compile)."""

        name = "eager-device"

        def updates(self):
            return head_update, verify_tail

    class ShadowBaseline(BaselineMode):
        name = "shadow-baseline"

    cls = EagerDeviceMode if base is CompileMode else ShadowBaseline
    register_mode(cls)
    try:
        model, head = tiny
        prompts = _prompts(3, seed=4)
        eng = SpecDecodeEngine(model, head, mode=cls.name, width=4, batch=3, block_size=16, block_table_width=8)
        res = eng.run(prompts, max_new_tokens=10)
        assert res.mode == cls.name and res.outputs == greedy_generate(model, prompts, 10)
        assert res.drafted > 0 and res.runtime_stats is None
    finally:
        del MODES[cls.name]
    assert cls.name not in MODES
