"""The Gated DeltaNet layer's Triton kernels (``models/triton_gdn.py``) against the torch recurrence, and on the
GPU against fla-core's ``fused_recurrent_gated_delta_rule`` (an implementation nobody here wrote).

On the CPU the kernels run in Triton's interpreter (``TRITON_INTERPRET=1``,
set in a child process so it never leaks into a CUDA run); on a GPU they run
compiled, in float32 and bfloat16, at the Qwen3.5-2B layer shape too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from oracles.scripts import run_case_script

CASES = Path(__file__).with_name("gdn_cases.py")
# (out, state, conv) bounds; the output's relative to its largest magnitude
TOL = {"float32": (2e-5, 1e-5, 1e-5), "bfloat16": (3e-2, 2e-2, 2e-2)}


def run_cases(device: str, dtype: str, shape: str, interpret: bool, tile: str = "auto") -> dict:
    return run_case_script(CASES, device, dtype, shape, tile, interpret=interpret)


def check(cases: dict, dtype: str, tile: str) -> None:
    out_tol, state_tol, conv_tol = TOL[dtype]
    assert set(cases) == {
        "verify_w4",
        "verify_b1_w6",
        "prefill_padded",
        "prefill_long_inplace",
        "prefill_chunked_auto",
        "short_inplace",
        "decode_inplace",
        "largest_batch",
        "hostile",
    }
    # a launch of the layer's own choice takes the chunked form there, unless a tile forces the row-by-row kernel
    chunked = cases["prefill_chunked_auto"]
    assert chunked["ran_chunked"] == (tile in ("auto", "wy", "wy4")), chunked
    for name, c in cases.items():
        assert c["finite"] and c["untouched"], (name, c)
        assert c["err_out"] <= out_tol * max(1.0, c["scale_out"]), (name, c)
        assert c["err_state"] <= state_tol and c["err_conv"] <= conv_tol, (name, c)


@pytest.mark.parametrize("tile", ["auto", "16", "32", "wy"])
@pytest.mark.parametrize("shape", ["tiny", "odd"])
def test_gdn_kernels_match_torch_interpreted(shape, tile):
    """The launch's own choice, both value tiles of the row-by-row delta rule and its chunked matrix form;
    the chunked conv."""
    pytest.importorskip("triton")
    check(run_cases("cpu", "float32", shape, interpret=True, tile=tile), "float32", tile)


@pytest.mark.gpu
@pytest.mark.parametrize("tile", ["auto", "16", "32", "wy", "wy4"])
@pytest.mark.parametrize(
    "dtype,shape", [("float32", "tiny"), ("float32", "odd"), ("float32", "real"), ("bfloat16", "real")]
)
def test_gdn_kernels_match_torch_cuda(dtype, shape, tile):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    cases = run_cases("cuda", dtype, shape, interpret=False, tile=tile)
    errs = json.dumps({k: round(v["err_out"], 7) for k, v in cases.items()})
    print(f"gdn kernels {dtype} {shape} tile {tile}: {errs}")
    check(cases, dtype, tile)


def test_long_prefills_of_small_batches_take_the_chunked_form(monkeypatch):
    """The launch's choice on the measured cases (Qwen3.5-2B's 16 value heads of 128): the chunked form for one
    sequence of 512 rows (2.9x faster on an H100), the row-by-row kernel for 8 sequences of 128 (1.6x faster there),
    a verification and decoding; nothing takes the chunked form when it is off."""
    triton_gdn = pytest.importorskip("specgen.models.triton_gdn")
    assert triton_gdn.takes_chunked(1, 512, 16, 128)
    assert triton_gdn.takes_chunked(2, triton_gdn.CHUNKED_FROM_ROWS, 16, 128)
    assert not triton_gdn.takes_chunked(1, triton_gdn.CHUNKED_FROM_ROWS - 1, 16, 128)
    assert not triton_gdn.takes_chunked(8, 128, 16, 128)
    assert not triton_gdn.takes_chunked(1, 4, 16, 128) and not triton_gdn.takes_chunked(32, 1, 16, 128)
    monkeypatch.setattr(triton_gdn, "CHUNKED_FROM_ROWS", None)
    assert not triton_gdn.takes_chunked(1, 512, 16, 128)


CHUNKED_CASES = Path(__file__).with_name("gdn_chunked_cases.py")


def check_chunked(cases: dict) -> None:
    assert set(cases) == {
        "prefill77_random",
        "prefill77_near_keys",
        "prefill77_strong_decay",
        "prefill77_overflowing_gate",
        "verify_w5_near_keys",
    }
    for name, forms in cases.items():
        assert set(forms) == {"wy", "rows"}, forms
        for form, c in forms.items():
            assert c["untouched"], (name, form, c)
            # relative to the largest output / state: the row-by-row form's own error is a few 1e-7; after a gate
            # that overflowed, the chunk's later rows take their decays as differences of L near the -110 floor
            # (an ulp of 110 is 7.6e-6), and NaN fails every bound
            tol = 1e-5 if name.endswith("overflowing_gate") and form != "rows" else 2e-6
            assert c["err_out"] <= tol and c["err_state"] <= tol, (name, form, c)


def test_chunked_delta_rule_on_hard_inputs_interpreted():
    """The chunked matrix form and the row-by-row kernel against a float64 recurrence where the triangular solve is
    hardest (consecutive keys that nearly coincide, beta near 1, almost no decay: inverting by the product
    (I + X)(I + X^2)... loses 7e-4 there), under strong decays, over a prefill of 77 rows with writes inside a
    chunk, at its end and in place, and a verification writing every row."""
    pytest.importorskip("triton")
    check_chunked(run_case_script(CHUNKED_CASES, "cpu", interpret=True))


@pytest.mark.gpu
def test_chunked_delta_rule_on_hard_inputs_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    cases = run_case_script(CHUNKED_CASES, "cuda", interpret=False)
    print("chunked delta rule:", json.dumps(cases))
    check_chunked(cases)


def _fla_inputs(batch: int, width: int, heads: int, dk: int, dv: int, seed: int):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    qk = heads * dk
    mixed = torch.randn(batch, width, 2 * qk + heads * dv, generator=gen)
    a_raw, b_raw = torch.randn(batch * width, heads, generator=gen), torch.randn(batch * width, heads, generator=gen)
    a_log, dt_bias = torch.rand(heads, generator=gen) * 2.7, torch.randn(heads, generator=gen)
    state0 = torch.randn(batch, heads, dk, dv, generator=gen) * 0.3
    return [t.cuda() for t in (mixed, a_raw, b_raw, a_log, dt_bias, state0)]


@pytest.mark.gpu
@pytest.mark.parametrize("batch,width", [(1, 4), (8, 4), (32, 6)])
def test_delta_rule_matches_fla(batch, width):
    """Per-row outputs and per-row states of ``delta_rule_slots`` equal fla-core's recurrence run over each prefix."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    fla = pytest.importorskip("fla.ops.gated_delta_rule")
    import torch.nn.functional as F

    from specgen.models import triton_gdn

    heads, dk, dv = 16, 128, 128
    mixed, a_raw, b_raw, a_log, dt_bias, state0 = _fla_inputs(batch, width, heads, dk, dv, batch)
    slots = batch * width
    pool = torch.zeros(slots + 1, heads, dk, dv, device="cuda")
    read = torch.arange(batch, dtype=torch.int32, device="cuda") * width + width - 1  # each sequence's last slot
    pool[read.long()] = state0
    write = torch.arange(slots, dtype=torch.int32, device="cuda")  # row j of sequence b -> slot b * W + j
    rows = torch.arange(slots, device="cuda").view(batch, width)
    out = triton_gdn.delta_rule_slots(
        mixed, a_raw, b_raw, a_log, dt_bias, pool, rows, read, write, slots, heads, dk
    ).view(batch, width, heads, dv)
    qk = heads * dk
    q, k, v = mixed.split([qk, qk, heads * dv], dim=-1)
    q, k, v = (t.reshape(batch, width, heads, -1).contiguous() for t in (q, k, v))
    g = (-a_log.exp() * F.softplus(a_raw + dt_bias)).view(batch, width, heads)
    beta = b_raw.sigmoid().view(batch, width, heads)
    for t in range(1, width + 1):
        o, final = fla.fused_recurrent_gated_delta_rule(
            q[:, :t],
            k[:, :t],
            v[:, :t],
            g=g[:, :t].contiguous(),
            beta=beta[:, :t].contiguous(),
            scale=dk**-0.5,
            initial_state=state0.clone(),
            output_final_state=True,
            use_qk_l2norm_in_kernel=True,
        )
        torch.testing.assert_close(out[:, :t], o.float(), atol=2e-4, rtol=2e-4)
        got_state = pool[(torch.arange(batch, device="cuda") * width + t - 1)]
        torch.testing.assert_close(got_state, final.float(), atol=2e-4, rtol=2e-4)
    print(f"delta rule == fla-core fused_recurrent_gated_delta_rule: B={batch} W={width}")


HYBRID = Path(__file__).with_name("hybrid_fast_cases.py")


def run_hybrid(device: str, dtype: str, interpret: bool) -> dict:
    return run_case_script(HYBRID, device, dtype, interpret=interpret)


def check_hybrid(res: dict, dtype: str) -> None:
    # bfloat16: the torch path rounds the conv's output and each projection where the kernels keep float32, and
    # the tiny model's gated norms scale near-zero head outputs up to unit size (see its preset), so its logits
    # differ by a few percent; float32 is the strict check
    rel = 5e-6 if dtype == "float32" else 6e-2
    for name in ("prefill", "verify", "head", "head_chained"):
        c = res[name]
        assert c["err_logits"] <= rel * c["scale"] and (dtype != "float32" or c["same_tokens"]), (name, c)
    if dtype == "float32":
        assert max(res["err_kv"], res["err_state"], res["err_conv"]) <= 2e-5, res
    else:  # about one bfloat16 step at the keys' and values' magnitude (< 16): 2 ** -4
        assert res["err_kv"] <= 0.125 and max(res["err_state"], res["err_conv"]) <= 5e-2, res


def test_hybrid_fast_forward_matches_torch_interpreted():
    """The whole tiny hybrid (conv, delta rule, gated norm, paged attention, MLP) on the Triton path equals its
    torch forward: a padded prefill then a verification from the committed slots."""
    pytest.importorskip("triton")
    check_hybrid(run_hybrid("cpu", "float32", interpret=True), "float32")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_hybrid_fast_forward_matches_torch_cuda(dtype):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    res = run_hybrid("cuda", dtype, interpret=False)
    print(f"hybrid fast forward {dtype}: " + json.dumps(res))
    check_hybrid(res, dtype)
