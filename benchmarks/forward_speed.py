"""The bare target forward and the MTP draft step, each captured alone in a CUDA graph.

For every forward (``--kernels torch,triton``), batch and width: the median
replay time of the verify forward over a context of ``--context`` tokens, the
MTP draft step per token (head forward + greedy token, one row per
sequence), and the kernels per layer counted from a profiled replay::

    python benchmarks/forward_speed.py --model qwen3-0.6b --batch 1,8,32 --width 4 \\
        --context 1024 --out benchmarks/results/performance/forward_triton.json

Both forwards run in the same process on the same weights; the JSON records
the command.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from specgen.engine.clock import replay_us
from specgen.engine.graphs import CapturedGraph
from specgen.models.mtp_head import MTPHead
from specgen.models.paged_kv import verify_metadata
from specgen.models.qwen3 import Qwen3Model


def capture(fn) -> torch.cuda.CUDAGraph:
    """``fn`` captured in a CUDA graph after two warm-up runs outside it (JIT compiles, allocator)."""
    return CapturedGraph(fn, torch.device("cuda"), warmup=2).graph


def kernels_in(graph: torch.cuda.CUDAGraph, top: int = 8) -> tuple[int, list]:
    """Kernels in one profiled replay, and the ``top`` kernel names by total time (us, count)."""
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    by_name: dict[str, list] = {}
    n = 0
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA or "mem" in e.name.lower():
            continue
        n += 1
        slot = by_name.setdefault(e.name[:70], [0.0, 0])
        slot[0] += e.time_range.elapsed_us()
        slot[1] += 1
    ranked = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]
    return n, [[name, round(us, 1), count] for name, (us, count) in ranked]


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen3-0.6b")
    p.add_argument("--batch", default="1,8,32")
    p.add_argument("--width", type=int, default=4)
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--block-table-width", type=int, default=64)
    p.add_argument("--kernels", default="torch,triton", help="comma list of torch, triton, triton+skinny")
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    dev = torch.device("cuda")
    batches = [int(b) for b in a.batch.split(",")]
    model = Qwen3Model.create(a.model, seed=0, dtype=torch.bfloat16, device=dev)
    head = MTPHead.create(model)
    bs, bt_w, w = a.block_size, a.block_table_width, a.width
    if a.context + w > bs * bt_w:
        sys.exit(f"--context {a.context} + --width {w} exceeds the table ({bt_w} x {bs})")
    blocks = max(batches) * bt_w
    model.allocate_kv_cache(blocks, bs, bt_w)
    head.allocate_kv_cache(blocks, bs)
    rows = []
    for kernels in a.kernels.split(","):
        # "triton+skinny": the Triton forward with the skinny GEMM for at most 16 rows
        model.forward_kernels = kernels.split("+")[0]
        os.environ["SPECGEN_SKINNY_GEMM"] = "1" if kernels.endswith("+skinny") else "0"
        for b in batches:
            bt = torch.arange(b * bt_w, dtype=torch.int32, device=dev).view(b, bt_w).flip(1).contiguous()
            seq = torch.full((b,), a.context, dtype=torch.int32, device=dev)
            pos, slots, kvl, qsl = verify_metadata(seq, bt, w, bs)
            toks = torch.randint(0, model.config.vocab_size, (b * w,), device=dev)
            t0 = time.perf_counter()
            g = capture(lambda: model(toks, pos, slots, bt, kvl, qsl, w))
            cap_s = time.perf_counter() - t0
            verify = replay_us(g.replay, a.repeats, 10, warm=3)
            n_kernels, verify_top = kernels_in(g)
            del g
            d_pos, d_slots, d_kvl, d_qsl = verify_metadata(seq, bt, 1, bs)
            hid = torch.randn(b, model.config.hidden_size, dtype=torch.bfloat16, device=dev)
            dtok = toks[:b].clone()
            gd = capture(lambda: model.greedy_tokens(head(dtok, d_pos, d_slots, hid, bt, d_kvl, d_qsl, 1)[1]))
            draft = replay_us(gd.replay, a.repeats, 10, warm=3)
            draft_kernels, draft_top = kernels_in(gd)
            del gd
            row = {
                "kernels": kernels,
                "batch": b,
                "width": w,
                "context": a.context,
                "verify_us": round(verify, 1),
                "draft_us_per_token": round(draft, 1),
                "verify_kernels": n_kernels,
                "kernels_per_layer": round(n_kernels / model.config.num_layers, 2),
                "draft_kernels": draft_kernels,
                "first_capture_s": round(cap_s, 2),
            }
            print(json.dumps(row), flush=True)
            row.update(verify_top_kernels=verify_top, draft_top_kernels=draft_top)
            rows.append(row)
    out = {
        "command": "python benchmarks/forward_speed.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "model": a.model,
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "block_size": bs,
        "block_table_width": bt_w,
        "rows": rows,
    }
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
