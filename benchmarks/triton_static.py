"""Static figures of a Triton kernel for a GPU that need no GPU: registers, spills, shared memory, barriers.

Compiles ``@triton.jit`` kernels ahead of time for ``sm_90`` with Triton's own ``ptxas`` and reads what the
assembler reports (``ptxas -v``) and what the PTX holds. A kernel whose design promises no shared memory, no
barrier or no spill keeps that promise here, on any machine with Triton installed.

Usage:
    python benchmarks/triton_static.py            the Gated DeltaNet slot kernels at the launch configurations
                                                  the engine uses (``models/triton_gdn.py``), one JSON line each
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


def static_stats(
    fn, signature: dict, constexprs: dict, num_warps: int = 4, arch: int = 90, aligned: bool = True
) -> dict:
    """``fn`` compiled for ``sm_<arch>``: ``registers``, ``spill_bytes`` (stores), ``shared_bytes`` (Triton's
    static shared memory), ``barriers`` and ``global_loads`` (instructions in the PTX).

    ``aligned``: every pointer argument is taken as 16-byte aligned, as Triton's launcher specializes a kernel
    for the tensors torch allocates (without it, loads and stores are not vectorized and each element keeps its
    own address: far more registers than the kernel the engine runs)."""
    sig = dict(signature)
    sig.update({name: "constexpr" for name in constexprs})
    attrs = {}
    if aligned:
        names = fn.arg_names
        attrs = {(names.index(k),): [["tt.divisibility", 16]] for k, v in signature.items() if v.startswith("*")}
    src = ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)
    kernel = triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": num_warps})
    ptx = kernel.asm["ptx"]
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        arch_name = f"sm_{arch}a" if arch >= 90 else f"sm_{arch}"
        done = subprocess.run(
            [ptxas, f"-arch={arch_name}", "-v", path, "-o", os.devnull], capture_output=True, text=True
        )
    if done.returncode != 0:
        raise RuntimeError(f"ptxas failed for {fn.__name__}: {done.stderr[-2000:]}")
    regs = re.search(r"Used (\d+) registers", done.stderr)
    spill = re.search(r"(\d+) bytes spill stores", done.stderr)
    return {
        "kernel": fn.__name__,
        "num_warps": num_warps,
        "registers": int(regs.group(1)) if regs else None,
        "spill_bytes": int(spill.group(1)) if spill else 0,
        "shared_bytes": int(kernel.metadata.shared),
        "barriers": len(re.findall(r"\bbar\.sync\b|\bbarrier\.sync\b", ptx)),
        "global_loads": len(re.findall(r"\bld\.global", ptx)),
    }


CONV_SIGNATURE = {
    "qkv": "*bf16",
    "weight": "*bf16",
    "pool": "*bf16",
    "rows": "*i64",
    "state_read": "*i32",
    "state_write": "*i32",
    "out": "*bf16",
    "num_slots": "i32",
    "N": "i32",
    "R": "i32",
    "C": "i32",
    "stride_n": "i32",
}
DELTA_SIGNATURE = {
    "mixed": "*bf16",
    "a_raw": "*bf16",
    "b_raw": "*bf16",
    "a_log": "*fp32",
    "dt_bias": "*fp32",
    "pool": "*fp32",
    "rows": "*i64",
    "state_read": "*i32",
    "state_write": "*i32",
    "out": "*fp32",
    "num_slots": "i32",
    "N": "i32",
    "R": "i32",
    "scale": "fp32",
    "stride_ab": "i32",
}
_WY_BUFFERS = {"uw": "*fp32", "ww": "*fp32", "qg": "*fp32", "kn": "*fp32", "cum_buf": "*fp32", "aqk": "*fp32"}
WY_PREPARE_SIGNATURE = {
    **{k: DELTA_SIGNATURE[k] for k in ("mixed", "a_raw", "b_raw", "a_log", "dt_bias", "rows")},
    **_WY_BUFFERS,
    **{"N": "i32", "R": "i32", "RP": "i32", "scale": "fp32", "stride_ab": "i32"},
}
WY_STATE_SIGNATURE = {
    **_WY_BUFFERS,
    **{k: DELTA_SIGNATURE[k] for k in ("pool", "rows", "state_read", "state_write", "out", "num_slots", "N", "R")},
    "RP": "i32",
}
# Qwen3.5-2B's linear layer (16 key and value heads of 128)
DELTA_SHAPE = {"HV": 16, "GROUP": 1, "DK": 128, "DV": 128, "BK": 128}


def gdn_configs():
    """(name, kernel, signature, constexprs, num_warps) of the slot kernels at the tiles, chunks and warps the
    launches take (the conv: 4 warps; the delta rule: one warp per value tile of 16 or 32)."""
    from specgen.models import triton_gdn, triton_gdn_chunks

    for bc in (32, 64, 128):
        for rp in (1, 4, 8):
            cx = {"K": 4, "BC": bc, "RP": rp}
            yield f"conv_chunks bc{bc} rp{rp}", triton_gdn_chunks._conv_chunks_kernel, CONV_SIGNATURE, cx, 4
    for bv in (16, 32):
        cx = dict(DELTA_SHAPE, BV=bv)
        yield f"delta bv{bv}", triton_gdn._delta_rule_slots_kernel, DELTA_SIGNATURE, cx, 1
    # the chunked matrix form's two launches (triton_gdn_wy) at their default launch; the engine takes it for long
    # prefills of small batches (triton_gdn.takes_chunked)
    from specgen.models import triton_gdn_prefill, triton_gdn_wy

    shape = {k: v for k, v in DELTA_SHAPE.items() if k != "GROUP"}
    cx = dict(shape, CH=triton_gdn_prefill.CHUNK, PRECISION="ieee")
    yield "wy_prepare", triton_gdn_wy._wy_prepare_kernel, WY_PREPARE_SIGNATURE, dict(cx, GROUP=1, BVF=128), 8
    yield "wy_state bv16", triton_gdn_wy._wy_state_kernel, WY_STATE_SIGNATURE, dict(cx, BV=16), 8


if __name__ == "__main__":
    for name, fn, sig, cx, warps in gdn_configs():
        print(json.dumps({"config": name, **static_stats(fn, sig, cx, num_warps=warps)}), flush=True)
