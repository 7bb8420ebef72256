"""What SpecVerifyRuntime promises an engine that integrates it: no silent eager runs, a hint that builds
what is missing, a warning when a step leaves the fast path, and a scratch block no live row maps."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import warnings

import pytest
import torch

from specgen.runtime import FastPathUnavailable, SpeculativeVerifyCapabilities, SpecVerifyRuntime, load_library
from specgen.runtime.device_guard import SCRATCH_ENTRY, DeviceGuard, DeviceGuardSpec
from specgen.runtime.step_plan import resolve_step_plan

W, BT, BS = 4, 8, 16  # a layout of the engine_kernels fixture (tests/conftest.py)
VOCAB = 50
I32 = torch.int32
CAPS = SpeculativeVerifyCapabilities(supports_in_graph_input_update=True, block_size=BS, block_table_width=BT)


def forward_of(width):
    def model_forward(bufs):
        return ((bufs["tokens"].long() * 7 + bufs["positions"].long()) % VOCAB).to(I32).view(-1, width)

    return model_forward


def inputs(batch, width, seed=0, max_len=60):
    gen = torch.Generator().manual_seed(seed)
    return (
        torch.randint(0, VOCAB, (batch,), generator=gen, dtype=I32),
        torch.randint(0, VOCAB, (batch, width - 1), generator=gen, dtype=I32),
        torch.randint(1, max_len, (batch,), generator=gen, dtype=I32),
        torch.randint(1, 64, (batch, BT), generator=gen, dtype=I32),
    )


def test_a_width_the_build_lacks_is_an_error_whose_hint_builds_it(engine_kernels, tmp_path):
    """The error names what is missing and a command; running that command makes the runtime construct."""
    folder = tmp_path / "kernels"
    shutil.copytree(engine_kernels.root, folder)
    width = 7
    with pytest.raises(FastPathUnavailable) as err:
        SpecVerifyRuntime(load_library(folder), forward_of(width), CAPS, width, max_batch=2)
    message = str(err.value)
    assert "a draft-to-verify plan of width 7" in message and "allow_eager=True" in message
    command = re.search(r"`(specgen build [^`]+)`", message).group(1)
    assert f"--out {folder}" in command and "--widths 7" in command
    argv = shlex.split(command)
    done = subprocess.run(
        [sys.executable, "-m", "specgen", *argv[1:], "--jobs", "2"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rt = SpecVerifyRuntime(load_library(folder), forward_of(width), CAPS, width, max_batch=2)
    assert rt.step(*inputs(2, width)).fast_path


def test_a_missing_variant_names_its_key(engine_kernels):
    plan = resolve_step_plan(engine_kernels, CAPS, W, "cuda")  # a CPU-only build has no cuda variants
    assert plan.unavailable == "variant_not_built" and plan.missing.startswith("the cuda variant ")


def test_a_model_that_does_not_opt_in_is_an_error_unless_eager_is_asked_for(engine_kernels):
    off = SpeculativeVerifyCapabilities(block_size=BS, block_table_width=BT)
    with pytest.raises(FastPathUnavailable, match="supports_in_graph_input_update=False"):
        SpecVerifyRuntime(engine_kernels, forward_of(W), off, W, max_batch=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # eager was asked for: no warning
        rt = SpecVerifyRuntime(engine_kernels, forward_of(W), off, W, max_batch=2, allow_eager=True)
        res = rt.step(*inputs(2, W))
    assert not res.fast_path and rt.stats()["fallback"] == {"capability_off": 1}


def test_the_first_step_that_leaves_the_fast_path_warns_once(engine_kernels):
    rt = SpecVerifyRuntime(engine_kernels, forward_of(W), CAPS, W, max_batch=2)
    good = inputs(2, W)
    assert rt.step(*good).fast_path
    far = (*good[:3], good[3])
    with pytest.warns(RuntimeWarning, match=r"left the fast path \(guard_failed\)"):
        assert not rt.step(*far, seq_len_bounds=(0, BT * BS)).fast_path
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not rt.step(*far, seq_len_bounds=(0, BT * BS)).fast_path
    assert rt.stats()["fallback"] == {"guard_failed": 2}


def test_a_table_that_maps_the_scratch_block_is_refused(engine_kernels):
    rt = SpecVerifyRuntime(engine_kernels, forward_of(W), CAPS, W, max_batch=2, scratch_block=5)
    last, drafts, _, table = inputs(2, W)
    seq_lens = torch.tensor([20, 40], dtype=I32)
    table[table == 5] = 6
    mapped = table.clone()
    mapped[1, 40 // BS] = 5  # the block that holds positions 40 .. 43
    with pytest.raises(ValueError, match="row 1 maps the scratch block 5"):
        rt.step(last, drafts, seq_lens, mapped)
    unmapped = table.clone()
    unmapped[0, BT - 1] = 5  # past S + W of row 0: the step never maps it
    assert rt.step(last, drafts, seq_lens, unmapped).fast_path
    with pytest.raises(ValueError, match="row 0 maps"):
        rt.check_block_table(unmapped)  # the whole table, as an engine checks it at set-up


def test_the_device_guard_flags_a_live_row_on_the_scratch_block(engine_kernels):
    rt = SpecVerifyRuntime(engine_kernels, forward_of(W), CAPS, W, max_batch=4)
    spec = DeviceGuardSpec.of(rt.step_plan, W, scratch_block=3)
    guard = DeviceGuard(spec, "cpu")
    bufs = {k: v.clone() for k, v in rt.buffers(4).items()}
    bufs["seq_lens"].copy_(torch.tensor([20, 0, 33, 0], dtype=I32))
    bufs["block_table"].copy_(torch.randint(4, 64, (4, BT), dtype=I32))
    bufs["block_table"][1].fill_(3)  # a padding row (S = 0) on the scratch block: fine
    bufs["accepted"].zero_()
    guard.fork(bufs, 4)
    assert int(guard.flag[0]) == 0
    bufs["block_table"][2, 33 // BS] = 3  # a live row's mapped block
    guard.fork(bufs, 4)
    assert guard.names(int(guard.flag[0])) == [SCRATCH_ENTRY]


def test_the_engine_refuses_a_scratch_block_it_hands_to_a_sequence(tiny, engine_kernels):
    from specgen.engine import EngineError, SpecDecodeEngine

    class SharedScratch(SpecDecodeEngine):
        scratch_block = 1  # the allocator hands block 1 to a sequence (every block but block 0)

    eng = SharedScratch(
        *tiny, mode="specgen", width=W, batch=2, block_size=BS, block_table_width=BT, library=engine_kernels
    )
    with pytest.raises(EngineError, match="maps the scratch block 1"):
        eng.run([[1, 2, 3], [4, 5]], steps=1)
