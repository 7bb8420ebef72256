"""Kernel-level A/B of the Gated DeltaNet slot kernels (``models/triton_gdn.py``): a baseline module file against
the checkout's, on the same inputs, at Qwen3.5-2B's linear-layer shape.

Usage:
    git show d68b9d6:models/triton_gdn.py > /tmp/gdn_base.py    # a module that stands alone (row by row only)
    python benchmarks/gdn_ab.py /tmp/gdn_base.py OUT.json [ROUNDS]
    mkdir /tmp/base; for m in triton_gdn triton_gdn_chunks triton_gdn_prefill triton_gdn_wy; do
        git show REF:models/$m.py > /tmp/base/$m.py; done      # (the modules REF has)
    python benchmarks/gdn_ab.py /tmp/base OUT.json [ROUNDS]             # a commit whose module imports another

Cases: verification at W = 4 for B = 1, 8, 32 (each sequence reads its committed slot and writes one slot per
row), plain decoding at B = 32 (one row, written in place), and prefills of 512 rows of one sequence and 128 rows
of eight (each one's last row writes). Each case records the tiles the checkout's launches take (the conv's
channels per program, the delta rule's values per program, or ``wy`` where it takes the chunked form).
Per case and kernel (``conv_slots``, ``delta_rule_slots``): 20 launches captured in one CUDA graph, the graph
replayed 7 times per round, the two modules in turn for ROUNDS rounds (default 3); the median over every replay,
in us per launch.
Both modules' outputs and written slots are compared (the largest difference).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import statistics
import sys
from pathlib import Path

import torch

from specgen.models import triton_gdn

HK, HV, DK, DV, K = 16, 16, 128, 128, 4
C = 2 * HK * DK + HV * DV
CASES = {  # name: (sequences, rows per sequence, verification-style slots)
    "verify_b1_w4": (1, 4, True),
    "verify_b8_w4": (8, 4, True),
    "verify_b32_w4": (32, 4, True),
    "decode_b32": (32, 1, False),
    "prefill_b1_r512": (1, 512, False),
    "prefill_b8_r128": (8, 128, False),
}
LAUNCHES, REPLAYS = 20, 7


def load(path: str):
    """The baseline: a module file that stands alone, or a folder holding ``triton_gdn.py`` and the modules it
    imports relatively (``triton_gdn_chunks.py``, ``triton_gdn_prefill.py``), loaded as a package of its own."""
    root = Path(path)
    if root.is_dir():
        if not (root / "triton_gdn.py").is_file():
            raise SystemExit(f"gdn_ab: {root} holds no triton_gdn.py")
        spec = importlib.util.spec_from_file_location(
            "gdn_base", root / "__init__.py", submodule_search_locations=[str(root)]
        )
        pkg = importlib.util.module_from_spec(spec)
        sys.modules["gdn_base"] = pkg
        if (root / "__init__.py").is_file():
            spec.loader.exec_module(pkg)
        return importlib.import_module("gdn_base.triton_gdn")
    if not root.is_file():
        raise SystemExit(f"gdn_ab: no baseline module at {root}")
    spec = importlib.util.spec_from_file_location("gdn_base", root)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def inputs(batch: int, rows_per: int, verify: bool) -> dict:
    g = torch.Generator(device="cpu").manual_seed(batch * 1000 + rows_per)
    n = batch * rows_per
    slots = max(n, batch) + 1
    if verify:  # read the committed slot (row W - 1's), write row j's state to slot b * W + j
        read = torch.arange(batch, dtype=torch.int32) * rows_per + rows_per - 1
        write = torch.arange(n, dtype=torch.int32)
    elif rows_per == 1:  # decoding in place
        read = write = torch.arange(batch, dtype=torch.int32)
    else:  # a prefill: the last row of each sequence writes the slot it read
        read = torch.arange(batch, dtype=torch.int32)
        write = torch.full((n,), -1, dtype=torch.int32)
        write[rows_per - 1 :: rows_per] = read
    d = {
        "qkv": torch.randn(n, C, generator=g).bfloat16(),
        "conv_w": (torch.randn(C, K, generator=g) / 2).bfloat16(),
        "windows": torch.randn(slots + 1, C, K - 1, generator=g).bfloat16(),
        "mixed": torch.randn(batch, rows_per, C, generator=g).bfloat16(),
        "a_raw": torch.randn(n, HV, generator=g).bfloat16(),
        "b_raw": torch.randn(n, HV, generator=g).bfloat16(),
        "a_log": torch.rand(HV, generator=g) * 2.7,
        "dt_bias": torch.randn(HV, generator=g),
        "states": torch.randn(slots + 1, HV, DK, DV, generator=g) * 0.3,
        "rows": torch.arange(n).view(batch, rows_per),
        "read": read,
        "write": write,
    }
    d = {k: v.cuda() for k, v in d.items()}
    d["num_slots"] = slots
    return d


def calls(mod, d: dict) -> dict:
    """The two kernels over ``d`` (each on its own copy of the pools): name -> (zero-argument call, pool)."""
    windows, states = d["windows"].clone(), d["states"].clone()
    conv = lambda: mod.conv_slots(  # noqa: E731
        d["qkv"], d["conv_w"], windows, d["rows"], d["read"], d["write"], d["num_slots"]
    )
    rule = lambda: mod.delta_rule_slots(  # noqa: E731
        d["mixed"],
        d["a_raw"],
        d["b_raw"],
        d["a_log"],
        d["dt_bias"],
        states,
        d["rows"],
        d["read"],
        d["write"],
        d["num_slots"],
        HK,
        DK,
    )
    return {"conv_slots": (conv, windows), "delta_rule_slots": (rule, states)}


def graph_of(fn) -> torch.cuda.CUDAGraph:
    fn()  # compile and warm outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(LAUNCHES):
            fn()
    return g


def replay_us(g: torch.cuda.CUDAGraph) -> list[float]:
    out = []
    for _ in range(REPLAYS):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1000 / LAUNCHES)
    return out


def main(base_path: str, out_path: str, rounds: int = 3) -> None:
    mods = {"base": load(base_path), "head": triton_gdn}
    result = {"gpu": torch.cuda.get_device_name(), "launches": LAUNCHES, "replays": REPLAYS, "rounds": rounds}
    for name, (batch, rows_per, verify) in CASES.items():
        d = inputs(batch, rows_per, verify)
        runs = {m: calls(mod, d) for m, mod in mods.items()}
        # one launch each from the same pools: the outputs and the written slots of the two modules
        diff = {}
        for kern in ("conv_slots", "delta_rule_slots"):
            fresh = {m: calls(mod, d)[kern] for m, mod in mods.items()}
            outs = {m: (fn().float(), pool.float()) for m, (fn, pool) in fresh.items()}
            diff[kern] = {
                "out": (outs["base"][0] - outs["head"][0]).abs().max().item(),
                "pool": (outs["base"][1] - outs["head"][1]).abs().max().item(),
            }
        graphs = {m: {k: graph_of(fn) for k, (fn, _) in r.items()} for m, r in runs.items()}
        times = {m: {k: [] for k in graphs[m]} for m in graphs}
        for _ in range(rounds):
            for m in graphs:
                for k, g in graphs[m].items():
                    times[m][k] += replay_us(g)
        tiles = {
            "conv_slots": triton_gdn._channels_per_program(batch, C),
            "delta_rule_slots": "wy"
            if triton_gdn.takes_chunked(batch, rows_per, HV, DV)
            else triton_gdn._values_per_program(batch, HV, DV),
        }
        case = {"batch": batch, "rows_per_sequence": rows_per, "head_tiles": tiles, "max_abs_diff": diff}
        for k in ("conv_slots", "delta_rule_slots"):
            base, head = statistics.median(times["base"][k]), statistics.median(times["head"][k])
            case[k] = {"base_us": round(base, 2), "head_us": round(head, 2), "speedup": round(base / head, 3)}
        result[name] = case
        print(name, json.dumps(case), flush=True)
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 3)
