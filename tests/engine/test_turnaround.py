"""The host's turnaround of a waiting mode (``Mode.synced_ns`` -> ``RunResult.host_turnaround_us``): read in the
timed steps of a timed, unprofiled run, one reading a step, nothing carried from an earlier run."""

from __future__ import annotations

import time

import pytest

from specgen.engine import SpecDecodeEngine
from specgen.models import MTPHead, Qwen3Model

PROMPTS = [[5, 9, 2], [7, 1, 4, 8]]


@pytest.fixture(scope="module")
def model():
    m = Qwen3Model.create("tiny", seed=0)
    return m, MTPHead.create(m, seed=1)


def _engine(model, mode, lib=None):
    m, head = model
    return SpecDecodeEngine(
        m, head, mode=mode, width=3, batch=2, block_size=16, block_table_width=8, library=lib, compile_backend="eager"
    )


@pytest.mark.parametrize("mode", ["baseline", "compile"])
def test_a_waiting_modes_turnaround_is_read_once_a_timed_step(model, mode):
    eng = _engine(model, mode)
    res = eng.run(PROMPTS, steps=4, warmup_steps=1, timing=True)
    # every timed step follows a step whose host waited (the warm-up step's, for the first)
    assert len(res.host_turnaround_us) == 4 and all(0 < t < 1e6 for t in res.host_turnaround_us)
    # a second run on the same engine, with no warm-up: its first step has no earlier wait of its own
    eng.strategy.synced_ns = time.perf_counter_ns() - 10**9  # as a run a second ago would have left it
    again = eng.run(PROMPTS, steps=3, warmup_steps=0, timing=True)
    assert len(again.host_turnaround_us) == 2 and max(again.host_turnaround_us) < 1e5
    # untimed and profiled runs read none
    assert eng.run(PROMPTS, steps=2, timing=False).host_turnaround_us == []
    assert eng.run(PROMPTS, steps=2, warmup_steps=1, timing=True, profile=True).host_turnaround_us == []


def test_a_mode_that_never_waits_reads_nothing(model, engine_kernels):
    res = _engine(model, "specgen", engine_kernels).run(PROMPTS, steps=3, warmup_steps=1, timing=True)
    assert res.host_turnaround_us == [] and res.steps == 3
