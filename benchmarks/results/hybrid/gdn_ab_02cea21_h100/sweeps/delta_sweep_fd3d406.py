"""The delta rule's launch configurations at Qwen3.5-2B's linear layer, timed in CUDA graphs.

python3 benchmarks/results/hybrid/gdn_ab_02cea21_h100/sweeps/delta_sweep_fd3d406.py OUT.json, at fd3d406 (after pip install -e .)
Per case of benchmarks/gdn_ab.py (verify B = 1, 8, 32 at W = 4, decode B = 32, prefills): form (rows, chunks) x
value tile (8, 16, 32, 64) x warps (4, 8); us per launch, median of 3 rounds of 7 replays of 20 launches; every
output and written state compared with the launch's default (must be 0.0).
Static figures (benchmarks/triton_static.py): rows bv32 w4 234 registers (2 programs per SM), w8 115 registers.
"""

import importlib.util
import json
import statistics
import sys

import torch
import triton

from specgen.models import triton_gdn as g

spec = importlib.util.spec_from_file_location("gdn_ab", "benchmarks/gdn_ab.py")
ab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ab)


def launch(d, states, form, bv, warps):
    mixed, a_raw, b_raw = d["mixed"], d["a_raw"], d["b_raw"]
    b, r, _ = mixed.shape
    n, hv = a_raw.shape
    dv = states.shape[-1]
    out = torch.zeros(n, hv, dv, dtype=torch.float32, device=mixed.device)
    args = (mixed, a_raw, b_raw, d["a_log"], d["dt_bias"], states, d["rows"], d["read"], d["write"], out)
    args += (d["num_slots"], n, r, ab.DK**-0.5, a_raw.stride(0))
    shape = dict(HV=hv, GROUP=hv // ab.HK, DK=ab.DK, DV=dv, BK=ab.DK, BV=bv, num_warps=warps)
    grid = (triton.cdiv(dv, bv), b * hv)
    if form == "chunks":
        g._delta_rule_chunks_kernel[grid](*args, RP=g._rows_per_chunk(r), **shape)
    else:
        g._delta_rule_slots_kernel[grid](*args, **shape)
    return out


def main(path):
    res = {"gpu": torch.cuda.get_device_name()}
    for name, (batch, rows_per, verify) in ab.CASES.items():
        d = ab.inputs(batch, rows_per, verify)
        ref_states = d["states"].clone()
        ref = ab.calls(g, d)["delta_rule_slots"]
        want = ref[0]().float()
        want_states = ref[1].clone()
        cells = {}
        for form in ("rows", "chunks"):
            for bv in (8, 16, 32, 64):
                for warps in (4, 8):
                    key = f"{form} bv{bv} w{warps}"
                    try:
                        st = ref_states.clone()
                        got = launch(d, st, form, bv, warps)
                        diff = max((got - want).abs().max().item(), (st - want_states).abs().max().item())
                        st = ref_states.clone()
                        fn = lambda st=st: launch(d, st, form, bv, warps)  # noqa: E731
                        graph = ab.graph_of(fn)
                        times = []
                        for _ in range(3):
                            times += ab.replay_us(graph)
                        cells[key] = {"us": round(statistics.median(times), 2), "max_abs_diff": diff}
                    except Exception as e:  # a config that does not compile (registers) is reported, not fatal
                        cells[key] = {"error": str(e)[:200]}
        default = g._values_per_program(batch, ab.HV, ab.DV)
        res[name] = {"default": f"{'chunks' if g.delta_rule_in_chunks(default) else 'rows'} bv{default} w4", "cells": cells}
        best = min((v["us"], k) for k, v in cells.items() if "us" in v)
        print(name, res[name]["default"], cells.get(res[name]["default"]), "best", best, flush=True)
    json.dump(res, open(path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
