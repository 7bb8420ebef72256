"""The LM head's product on CUDA: cuBLAS (``F.linear``) against the skinny GEMM (``cuda_forward.lm_head``'s kernel,
its default tile for the shape) at each row count, the weight streamed from memory (two copies, used in turn).

    python3 benchmarks/lm_head_speed.py --model qwen3-0.6b --rows 1,4,8,16,32,64,128 --out lm_head.json

Each figure is the median over ``--repeats`` replays of a CUDA graph of ``--launches`` products
(``skinny_gemm_sweep.time_graph``), per product; ``max_err`` is the skinny result's largest difference from a float32
product of the same bfloat16 inputs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen3-0.6b", help="a Qwen3 or Qwen3.5 preset (its vocabulary x hidden)")
    p.add_argument("--rows", default="1,4,8,16,32,64,128")
    p.add_argument("--launches", type=int, default=20)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        p.error("needs a CUDA device")
    sys.path.insert(0, str(Path(__file__).parent))
    from skinny_gemm_sweep import shapes, time_graph

    from specgen.models.skinny_gemm import MAX_HEAD_ROWS, block_rows, config_for, skinny_gemm, tall

    rows = [int(r) for r in a.rows.split(",")]
    if not all(1 <= m <= MAX_HEAD_ROWS for m in rows):
        p.error(f"--rows: each from 1 to {MAX_HEAD_ROWS}")
    _, n, k, _ = next(s for s in shapes(a.model, lm_head=True) if s[0] == "lm_head")
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
    ws = [w, w.clone()]
    out = []
    for m in rows:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        err = (skinny_gemm(x, w).float() - x.float() @ w.float().T).abs().max().item()
        r = {
            "m": m,
            "cublas_us": round(time_graph(lambda i: F.linear(x, ws[i % 2]), a.launches, a.repeats), 2),
            "skinny_us": round(time_graph(lambda i: skinny_gemm(x, ws[i % 2]), a.launches, a.repeats), 2),
            "max_err": err,
            "config": list(tall(config_for(n, k, False), block_rows(m))),
        }
        print(json.dumps(r), flush=True)
        out.append(r)
    doc = {"command": " ".join(sys.argv), "device": torch.cuda.get_device_name(), "n": n, "k": k, "rows": out}
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
