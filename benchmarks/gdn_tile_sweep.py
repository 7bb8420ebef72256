"""The delta rule's launch configurations (``models/triton_gdn.py``): value tile x warps per program, per case of
``benchmarks/gdn_ab.py`` (Qwen3.5-2B's linear layer), timed in CUDA graphs; the basis of the launch's choice
(``_values_per_program``, one warp). The chunked matrix form (``models/triton_gdn_wy.py``) is timed beside it
(cells ``wy bvV wN PRECISION``), the basis of ``triton_gdn.takes_chunked``.

Usage:
    python benchmarks/gdn_tile_sweep.py OUT.json [TILES [WARPS [CASES]]]   e.g. TILES=16,32,64 WARPS=1,2,4 (the
                                                                         defaults)

CASES: a comma-separated list of ``gdn_ab.CASES`` names and prefills ``prefill_bB_rR`` (B sequences of R rows);
all of ``gdn_ab.CASES`` by default.

Per case and configuration: 20 launches in one CUDA graph, replayed 7 times per round for 3 rounds, the median
in us per launch; every configuration's output and written states compared with the launch's own (the largest
difference: the reductions' order changes with the tile and the warps, so a few ulps). The case's launch
configuration is marked, and the fastest named.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from pathlib import Path

import torch
import triton

from specgen.models import triton_gdn, triton_gdn_wy

spec = importlib.util.spec_from_file_location("gdn_ab", Path(__file__).with_name("gdn_ab.py"))
ab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ab)


def launch(d: dict, states: torch.Tensor, bv: int, warps: int) -> torch.Tensor:
    """``triton_gdn.delta_rule_slots`` with the value tile and the warps given."""
    mixed, a_raw = d["mixed"], d["a_raw"]
    b, r, _ = mixed.shape
    n, hv = a_raw.shape
    out = torch.zeros(n, hv, ab.DV, dtype=torch.float32, device=mixed.device)
    args = (mixed, a_raw, d["b_raw"], d["a_log"], d["dt_bias"], states, d["rows"], d["read"], d["write"], out)
    args += (d["num_slots"], n, r, ab.DK**-0.5, a_raw.stride(0))
    shape = dict(HV=hv, GROUP=hv // ab.HK, DK=ab.DK, DV=ab.DV, BK=ab.DK, BV=bv, num_warps=warps)
    triton_gdn._delta_rule_slots_kernel[(triton.cdiv(ab.DV, bv), b * hv)](*args, **shape)
    return out


# the chunked form's (value tile, warps, precision)
CHUNKED = (
    (16, 8, "ieee"),
    (32, 8, "ieee"),
    (16, 4, "ieee"),
    (16, 8, "tf32x3"),
)


def launch_chunked(d: dict, states: torch.Tensor, bv: int, warps: int, precision: str) -> torch.Tensor:
    args = (d["mixed"], d["a_raw"], d["b_raw"], d["a_log"], d["dt_bias"], states, d["rows"], d["read"], d["write"])
    kw = dict(values_per_program=bv, num_warps=warps, precision=precision)
    return triton_gdn_wy.delta_rule_wy(*args, d["num_slots"], ab.HK, ab.DK, **kw)


def time_cell(d: dict, want: torch.Tensor, want_states: torch.Tensor, fn) -> dict:
    """``fn(states)``'s largest difference from the launch's output and states, and its median us per launch."""
    states = d["states"].clone()
    got = fn(states)
    diff = max((got - want).abs().max().item(), (states - want_states).abs().max().item())
    states = d["states"].clone()
    graph = ab.graph_of(lambda: fn(states))
    times = [t for _ in range(3) for t in ab.replay_us(graph)]
    return {"us": round(statistics.median(times), 2), "max_abs_diff": diff}


def case_shape(name: str) -> tuple[int, int, bool]:
    """``gdn_ab.CASES[name]``, or ``prefill_bB_rR``'s (B, R, False)."""
    if name in ab.CASES:
        return ab.CASES[name]
    parts = name.split("_")
    if len(parts) != 3 or parts[0] != "prefill" or not parts[1][1:].isdigit() or not parts[2][1:].isdigit():
        raise SystemExit(f"unknown case {name!r}: a gdn_ab.CASES name or prefill_bB_rR")
    return int(parts[1][1:]), int(parts[2][1:]), False


def main(out_path: str, tiles: list[int], warps: list[int], names: list[str]) -> None:
    result = {"gpu": torch.cuda.get_device_name(), "tiles": tiles, "warps": warps}
    for name in names:
        batch, rows_per, verify = case_shape(name)
        d = ab.inputs(batch, rows_per, verify)
        own = ab.calls(triton_gdn, d)["delta_rule_slots"]
        want, want_states = own[0]().float(), own[1].clone()
        cells = {}
        for bv in tiles:
            for w in warps:
                cells[f"bv{bv} w{w}"] = time_cell(d, want, want_states, lambda s, bv=bv, w=w: launch(d, s, bv, w))
        for bv, w, prec in CHUNKED:
            fn = lambda s, bv=bv, w=w, prec=prec: launch_chunked(d, s, bv, w, prec)  # noqa: E731
            cells[f"wy bv{bv} w{w} {prec}"] = time_cell(d, want, want_states, fn)
        if triton_gdn.takes_chunked(batch, rows_per, ab.HV, ab.DV):
            chosen = f"wy bv16 w{triton_gdn._chunked_warps(batch, ab.HV, ab.DV)} ieee"
        else:
            chosen = f"bv{triton_gdn._values_per_program(batch, ab.HV, ab.DV)} w1"
        fastest = min(cells, key=lambda k: cells[k]["us"])
        result[name] = {"launch": chosen, "fastest": fastest, "cells": cells}
        print(name, "launch", chosen, cells.get(chosen), "fastest", fastest, cells[fastest], flush=True)
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    ints = lambda i, default: [int(x) for x in sys.argv[i].split(",")] if len(sys.argv) > i else default  # noqa: E731
    names = sys.argv[4].split(",") if len(sys.argv) > 4 else list(ab.CASES)
    main(sys.argv[1], ints(2, [16, 32, 64]), ints(3, [1, 2, 4]), names)
