"""benchmarks/ncu_summary.py (a profiled launch read from ncu's CSV pages) and benchmarks/vocab_ab.py's report and
C sweep (the kernel A/B of the vocabulary pass): what they read and print, on files made here."""

from __future__ import annotations

import json
import os
import time

from oracles.scripts import benchmark_module

_module = benchmark_module


DETAILS = """==PROF== Connected to process 1
"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"
"0","spec_target_sample_kernel","GPU Speed Of Light Throughput","Duration","us","41.22"
"0","spec_target_sample_kernel","GPU Speed Of Light Throughput","Compute (SM) Throughput","%","12.1"
"0","spec_target_sample_kernel","Memory Workload Analysis","Mem Busy","%","3.1"
"""
SOURCE = """"#","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)"
"1","int x = 0;","10","5"
"2","while (AtomicLoad(p) < n) spin++;","1,300","290"
"3","__syncthreads();","90","80"
"4","return;","0","0"
"""


def test_ncu_summary_keeps_the_named_metrics_and_ranks_source_lines_by_samples(tmp_path, capsys):
    mod = _module("ncu_summary")
    (tmp_path / "d.csv").write_text(DETAILS)
    (tmp_path / "s.csv").write_text(SOURCE)
    assert mod.main([str(tmp_path / "d.csv"), str(tmp_path / "s.csv"), "--top", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert any("Duration" in ln and "41.22 us" in ln for ln in out) and not any("Mem Busy" in ln for ln in out)
    ranked = out[out.index(next(ln for ln in out if "most warp-state samples" in ln)) + 1 :]
    # 1300 of the 1400 samples, the count written with a thousands separator
    assert len(ranked) == 2 and "AtomicLoad" in ranked[0] and ranked[0].lstrip().startswith("92.9%")
    assert "__syncthreads" in ranked[1]
    (tmp_path / "bad.csv").write_text("no table here\n")
    assert "no details table" in mod.details(tmp_path / "bad.csv")[0]
    assert "no source table" in mod.source(tmp_path / "bad.csv", 3)[0]


def test_vocab_ab_report_lines_up_the_folders_and_finds_the_fastest_chunks(tmp_path):
    mod = _module("vocab_ab")
    assert mod.sweep_chunks(33) == [1, 2, 4, 8, 16, 32, 33] and mod.sweep_chunks(1) == [1]
    assert mod.sweep_chunks(4) == [1, 2, 4]
    row = {"family": "spec_target_sample", "setting": "t0.7_p0.9", "B": 1, "C": 33}
    base, new = tmp_path / "time_vocab_base.json", tmp_path / "time_sampling_test_kernels.json"
    base.write_text(json.dumps([{**row, "us": 80.0}]))
    new.write_text(json.dumps([{**row, "us": 60.0}]))
    os.utime(base, (time.time() - 60, time.time() - 60))  # timed first: the base
    sweep = [{**row, "C": c, "engine_C": 33, "us": us} for c, us in ((1, 300.0), (16, 40.0), (33, 60.0))]
    (tmp_path / "sweep_sampling_test_kernels.json").write_text(json.dumps(sweep))
    lines = mod.report(tmp_path).splitlines()
    assert lines[0].startswith("| family | setting | B | C | vocab_base us | sampling_test_kernels us |")
    assert lines[2] == "| spec_target_sample | t0.7_p0.9 | 1 | 33 | 80.0 | 60.0 | 0.750 |"
    assert lines[-1] == "| spec_target_sample | 1 | 33 | 60.0 | 16 | 40.0 |"


SECTIONED = """"File Path","/usr/local/cuda/include/atomic.h"
"Function Name","spec_target_sample__any_kernel"
"Line No","Source","Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)"
"102","return __ullAtomicAdd(address, val);","-","-","30","20"
"","","0x7f00","      ATOMG.E.ADD.64","30","20"
"File Path","/tmp/spec_target_sample__any.cu"
"Function Name","spec_target_sample__any_kernel"
"Line No","Source","Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)"
"955","condval = AtomicLoad(p);","-","-","70","60"
"","","0x7f10","      LD.E.64.STRONG.GPU","70","60"
"""


def test_ncu_summary_reads_the_per_file_source_tables_of_newer_ncu(tmp_path):
    mod = _module("ncu_summary")
    (tmp_path / "s.csv").write_text(SECTIONED)
    ranked = mod.source(tmp_path / "s.csv", 5)
    assert len(ranked) == 2  # the SASS rows under each source line are not lines of their own
    assert ranked[0].lstrip().startswith("70.0%") and "spec_target_sample__any.cu:" in ranked[0]
    assert "955" in ranked[0] and "AtomicLoad" in ranked[0]
    assert ranked[1].lstrip().startswith("30.0%") and "atomic.h:" in ranked[1] and "__ullAtomicAdd" in ranked[1]


KERNEL = """extern "C" __global__ void k(int64_t* __restrict__ vocab_parts, int B, int C, int W);
extern "C" __global__ void __launch_bounds__(1024, 1) k(int64_t* __restrict__ vocab_parts, int B, int C, int W) {
  int x = 0;
  __syncthreads();
  for (int i = 0; i < 3; ++i) {
    __syncthreads();
  }
}"""


def test_vocab_trace_stamps_every_sync_of_block_zero_and_folds_a_loop_into_one_run():
    mod = _module("vocab_trace")
    text, sites = mod.stamped(KERNEL, "B * W")
    assert sites == [4, 6]  # the two syncs' source lines
    lines = text.split("\n")
    assert "int64_t sg_n = 0;" in lines[2] and "| 255;" in lines[2]  # the entry stamp opens the body
    assert all("blockIdx.x == 0" in ln and "(int64_t)(B * W) * (int64_t)C" in ln for ln in lines if "sg_n++" in ln)
    assert sum("sg_n++" in ln for ln in lines) == 3
    # entry at 100; site 0 at 150; site 1 three times (a loop), then zero slots end the stamps
    col = [100 << 8 | 255, 150 << 8 | 0, 160 << 8 | 1, 170 << 8 | 1, 300 << 8 | 1, 0, 7 << 8 | 0]
    runs = mod.decode(col, sites)
    assert runs == [
        {"site": 0, "line": 4, "cycles": 50, "times": 1, "at": 50},
        {"site": 1, "line": 6, "cycles": 150, "times": 3, "at": 200},
    ]
    assert mod.decode([150 << 8 | 0], sites) == []  # no entry stamp: nothing to time from
    too_many = "\n".join([KERNEL.split("\n")[1]] + ["__syncthreads();"] * 256)
    try:
        mod.stamped(too_many, "B")
    except ValueError as e:
        assert "more than 255 syncs" in str(e)
    else:
        raise AssertionError("256 syncs were stamped")


def test_vocab_trace_plot_draws_one_bar_per_trace_and_says_where_the_slots_ran_out(tmp_path, capsys):
    mod = _module("vocab_trace")
    runs = [{"site": 0, "line": 4, "cycles": 1980 * 3, "times": 1, "at": 1980 * 3}]
    full = {"family": "spec_target_sample", "B": 1, "C": 2, "runs": runs * 3}  # 1 + 3 stamps, 4 * 2 slots
    short = {"family": "spec_draft_sample", "B": 1, "C": 2, "runs": runs}  # 1 + 1 stamps in 2 slots: cut
    assert not mod._cut(full) and mod._cut(short) and not mod._cut({**short, "cut": False})
    for name in ("a", "b"):
        (tmp_path / f"{name}.json").write_text(json.dumps({"sm_mhz": 1980.0, "launches": [full, short]}))
    out = tmp_path / "phases.png"
    mod.main(["plot", str(out), f"base={tmp_path / 'a.json'}", f"new={tmp_path / 'b.json'}"])
    assert out.stat().st_size > 1000 and out.read_bytes()[:4] == b"\x89PNG"
    assert f"wrote {out}" in capsys.readouterr().out


def test_vocab_trace_tags_say_what_the_code_between_two_syncs_names():
    mod = _module("vocab_trace")
    src = "\n".join(
        [
            "int64_t nbar = 0; __shared__ int64_t cand[1537];",  # declarations name no phase
            "__syncthreads();",
            "x = expf(s - m); sample_probs[i] = x; ho = atomicAdd((&(hist_lo[b])), v);",
            "__syncthreads();",
            "while (AtomicLoad((&(vocab_sums[r])), 2) < (nbar * C)) spin++;",
            "__syncthreads();",
        ]
    )
    assert mod.tags(src, [2, 4, 6]) == ["", "exp, p row, histogram adds", "wait for the row, row sums in"]


def _folder(root):
    """A build folder's layout with three variants: two families, two targets (files of a few bytes)."""
    variants = []
    for fam, target in (("spec_target_sample", "cuda"), ("spec_target_sample", "c"), ("spec_draft_sample", "cuda")):
        src, art = f"{target}/{fam}.cu", f"{target}/{fam}.bin"
        (root / target).mkdir(parents=True, exist_ok=True)
        (root / src).write_text(f"// {fam} {target}")
        (root / art).write_bytes(b"\x7fELF" + fam.encode())
        variants.append({"family": fam, "target": target, "source": src, "artifact": art})
    (root / "manifest.json").write_text(json.dumps({"version": 1, "variants": variants}))
    (root / "__init__.py").write_text("")
    return variants


def test_kernel_subset_keeps_the_named_families_and_targets_and_refuses_unknown_names(tmp_path, capsys):
    mod = _module("kernel_subset")
    src, dst = tmp_path / "src", tmp_path / "dst"
    _folder(src)
    assert mod.main([str(src), str(dst), "--families", "spec_target_sample", "--targets", "cuda"]) == 0
    manifest = json.loads((dst / "manifest.json").read_text())
    assert manifest["version"] == 1
    assert [(v["family"], v["target"]) for v in manifest["variants"]] == [("spec_target_sample", "cuda")]
    assert sorted(p.relative_to(dst).as_posix() for p in dst.rglob("*") if p.is_file()) == [
        "__init__.py",
        "cuda/spec_target_sample.bin",
        "cuda/spec_target_sample.cu",
        "manifest.json",
    ]
    assert "1 variants" in capsys.readouterr().out
    assert len(mod.subset(src, dst)) == 3  # no names: every variant (DST made again)
    assert mod.main([str(src), str(dst), "--families", "spec_target_sampel"]) == 2
    assert "no variant of family spec_target_sampel" in capsys.readouterr().err
    assert mod.main([str(src), str(dst), "--targets", "npu"]) == 2
