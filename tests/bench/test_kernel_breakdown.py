"""Where a profiled step's device time goes: the classes of kernel names, the per-part cells, the table, the
picture, and ``specgen bench --replot`` over a bench.json whose runs predate the breakdown."""

from __future__ import annotations

import json

import pytest

from specgen.bench import kernel_breakdown as kb
from specgen.bench import kernel_timeline as kt

FORWARD = ["embed_kernel", "nvjet_sm90_tst_128x32", "_delta_rule_slots_kernel", "_paged_attention_kernel"]


def _x(cat, name, ts, dur, corr, stream=7):
    args = {"stream": stream, "correlation": corr}
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": stream, "args": args}


def _trace(n=4, lost=()):
    """``n`` decode steps: a draft (a GEMM and an argmax), a head family and a host copy before the forward, the
    forward (durations 5, 7, 11, 13 us), a guard kernel on a side stream and the acceptance after it.  Steps in
    ``lost`` run a forward whose kernels are not the profiled forward's (no forward located)."""
    ev, t, corr = [], 100.0, 10
    for k in range(n):
        ev += [_x("user_annotation", kt.phase_name("draft", k), t, 4.0, None), _x("cuda_runtime", "g", t + 1, 1, corr)]
        ev += [_x("kernel", "_skinny_gemm_kernel", t + 8, 30.0, corr)]
        ev += [_x("kernel", "void at::native::reduce_kernel<ArgMaxOps<float>>", t + 38, 2.0, corr)]
        v = t + 41
        ev += [_x("user_annotation", kt.phase_name("verify", k), v, 4.0, None), _x("cuda_runtime", "g", v, 1, corr + 1)]
        ev += [_x("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", v + 1, 1.5, corr + 1)]
        ev += [_x("kernel", "spec_verify_head_update__w4_kernel", v + 3, 2.5, corr + 1)]
        d = v + 6
        names = FORWARD if k not in lost else ["other_forward"] * len(FORWARD)
        ev.append(_x("kernel", "void at::native::compare_scalar_kernel<long>", d + 1, 3.0, corr + 1, stream=9))
        for name, dur in zip(names, (5.0, 7.0, 11.0, 13.0)):
            ev.append(_x("kernel", name, d, dur, corr + 1))
            d += dur
        ev.append(_x("kernel", "greedy_prefix_verify__w4_kernel", d + 1, 1.0, corr + 1))
        corr, t = corr + 2, d + 10
    return {"traceEvents": ev}


@pytest.mark.parametrize(
    "name, cls",
    [
        ("nvjet_sm90_tst_512x8_64x3_2x1_v_bz_TNT", "matmul"),
        ("void cublasLt::splitKreduce_kernel<32, 16, int, float>", "matmul"),
        ("_skinny_gemm_kernel", "matmul"),
        ("_delta_rule_slots_kernel", "delta rule"),
        ("_wy_state_kernel", "delta rule"),
        ("_conv_chunks_kernel", "conv"),
        ("_paged_attention_kernel", "attention"),
        ("_gated_qk_norm_rope_store_kernel", "attention"),
        ("_add_rms_norm_kernel", "norm"),
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, at::native::ArgMaxOps", "argmax"),
        ("_argmax_rows_kernel", "argmax"),
        ("spec_target_sample__w4_kernel", "vocabulary pass"),
        ("spec_verify_hybrid_head_update__w4_bt16_bs128_kernel", "boundary family"),
        ("prepare_next_draft__w4_bt16_bs128_kernel", "boundary family"),
        ("Memcpy DtoH (Device -> Pinned)", "copy"),
        ("Memset (Unknown)", "copy"),
        ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>", "copy"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", "other torch"),
        ("_silu_mul_kernel", "other"),
    ],
)
def test_kernel_names_fall_in_their_class(name, cls):
    assert kb.kernel_class(name) == cls


def test_cells_add_up_per_part_and_steps_without_a_forward_are_left_out():
    steps = kt.attribute(kt.load_trace(_trace(n=4, lost=(2,))))
    out = kb.step_breakdown(steps, FORWARD)
    assert out["steps"] == 3  # step 2's forward is not located
    parts = out["parts"]
    assert parts["draft"] == pytest.approx({"matmul": 30.0, "argmax": 2.0})
    assert parts["boundary"] == pytest.approx({"copy": 1.5, "boundary family": 3.5})  # head and tail
    # the forward's own kernels and the side stream's guard kernel that runs inside its span
    assert parts["forward"] == pytest.approx(
        {"matmul": 7.0, "delta rule": 11.0, "attention": 13.0, "other torch": 3.0, "other": 5.0}
    )
    top = out["kernels"]
    assert [k["us"] for k in top] == sorted((k["us"] for k in top), reverse=True)
    assert top[0] == {"name": "_skinny_gemm_kernel", "class": "matmul", "part": "draft", "calls": 1.0, "us": 30.0}
    assert len(kb.step_breakdown(steps, FORWARD, top=3)["kernels"]) == 3
    assert kb.step_breakdown(steps, ["absent"]) is None


def test_the_profiled_figures_carry_the_breakdown_and_the_table_shows_it():
    from specgen.bench.profiler import figures

    runs = []
    for mode in ("baseline", "specgen"):
        row = {"mode": mode, "depth": 3, "batch": 2}
        row.update(figures(_trace(), FORWARD))
        runs.append(row)
    assert runs[1]["kernel_breakdown"]["steps"] == 4
    text = kb.breakdown_table({"runs": runs})
    lines = text.splitlines()
    assert lines[1] == "depth 3, B = 2"
    forward = next(line for line in lines if line.split()[:2] == ["specgen", "forward"])
    assert float(forward.split()[2]) == pytest.approx(39.0)  # 5 + 7 + 11 + 13 + the guard's 3
    assert "heaviest kernels of specgen" in text and "_skinny_gemm_kernel" in text
    assert kb.breakdown_table({"runs": [{"mode": "x", "depth": 3, "batch": 1}]}) == ""


def test_replot_computes_breakdowns_from_saved_traces(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from specgen.bench import profiler as bp
    from specgen.bench.report import write
    from specgen.cli import main

    runs = []
    for mode in ("baseline", "specgen"):
        row = {"mode": mode, "depth": 3, "batch": 1, "width": 4, "tpot_ms": 1.0, "step_us": 10.0}
        row["kernel_trace"] = bp.trace_name(row)
        bp.write_trace(tmp_path / row["kernel_trace"], _trace(), FORWARD, row)
        runs.append(row)
    result = {"model": "tiny", "runs": runs, "environment": {"device": "cpu"}}
    stale = tmp_path / "kernel_breakdown.png"
    stale.write_bytes(b"an earlier run's picture")
    write(result, tmp_path)  # runs without a breakdown: no picture, and the stale one is gone
    assert not stale.exists()
    bench_json = json.loads((tmp_path / "bench.json").read_text())
    assert all("kernel_breakdown" not in r for r in bench_json["runs"])
    assert main(["bench", "--replot", str(tmp_path / "bench.json")]) == 0
    printed = capsys.readouterr().out
    assert "where a step's device time goes" in printed and f"wrote {stale}" in printed
    assert stale.read_bytes()[:4] == b"\x89PNG"
