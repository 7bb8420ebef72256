"""The two-launch Triton argmax equals ``torch.argmax`` (ties, signed zeros, NaN, ``-inf`` rows, block edges);
and a verify step's forward writes its int32 ``target_tokens`` in place, so no copy follows it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from oracles.scripts import run_case_script

from specgen.models import cuda_forward

CASES = Path(__file__).with_name("argmax_cases.py")


def run_cases(device: str, interpret: bool, script: Path = CASES) -> dict:
    return run_case_script(script, device, interpret=interpret)


def check(res: dict) -> None:
    assert res["bad"] == [] and res["checks"] >= 100 and res["errors"] == 2, res


def test_argmax_rows_equals_torch_interpreted():
    pytest.importorskip("triton")
    check(run_cases("cpu", interpret=True))


@pytest.mark.gpu
def test_argmax_rows_equals_torch_cuda():
    check(run_cases("cuda", interpret=False))


def test_torch_choice_writes_into_out():
    x = torch.randn(6, 33)
    out = torch.full((6,), -1, dtype=torch.int32)
    got = cuda_forward.argmax(x, "torch", out)
    assert got is out and torch.equal(out.long(), x.argmax(-1))
    assert torch.equal(cuda_forward.argmax(x, "auto"), x.argmax(-1))  # the CPU: torch's


BLOCK_CASES = Path(__file__).with_name("block_draft_kernels_cases.py")


def test_block_drafts_on_the_fast_kernels_equal_torch_interpreted():
    """DFlash's argmax and DSpark's Markov chain (its bias GEMM and argmax) on the target's Triton kernels give the
    torch choice's drafts bit for bit, ties included (batches 1 to 17, vocabularies across the argmax's blocks)."""
    pytest.importorskip("triton")
    res = run_cases("cpu", interpret=True, script=BLOCK_CASES)
    assert res["bad"] == [] and res["checks"] == 7, res


@pytest.mark.gpu
def test_block_drafts_on_the_fast_kernels_equal_torch_cuda():
    res = run_cases("cuda", interpret=False, script=BLOCK_CASES)
    assert res["bad"] == [] and res["checks"] == 7, res
