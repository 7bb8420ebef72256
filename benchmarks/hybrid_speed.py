"""The hybrid target's bare forwards and the linear-state head member, each captured alone in a CUDA graph.

For every batch: the median replay time of the bare verify forward (W rows
per sequence) and of the bare single-token decode step (one row) over a
context of ``--context`` tokens, their ratio, and the kernels per replay;
with ``--torch`` also the torch forward (the reference path) at B = 1. Then,
for the verify width W at bt64 bs128, the composite head with the linear
state (``spec_verify_hybrid_head_update``) against the plain composite
(``spec_verify_head_update``), each launched alone ``ALONE`` times per replay:
the difference is what the linear-state member costs inside the head::

    python benchmarks/hybrid_speed.py --model qwen3.5-2b --batch 1,8,32 --width 4 --context 1024 \\
        --kernels build/specgen_kernels --out benchmarks/results/hybrid/hybrid_speed.json

Both paths run in the same process; the JSON records the command.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

from specgen.engine.clock import replay_us
from specgen.engine.graphs import CapturedGraph
from specgen.models.qwen3_5 import Qwen35Model
from specgen.runtime.library import load_library
from specgen.specializations.families import FAMILIES, shape_of

I32 = torch.int32
ALONE = 20


def time_graph(fn, replays: int = 50, repeats: int = 15) -> tuple[float, CapturedGraph]:
    graph = CapturedGraph(fn, torch.device("cuda"), warmup=2)
    return replay_us(graph, repeats, replays), graph


def kernels_in(graph: CapturedGraph) -> int:
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        graph()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and "mem" not in e.name)


def forward_fn(model: Qwen35Model, batch: int, rows: int, context: int, bs: int, bt: int):
    """The bare forward of ``rows`` rows per sequence after ``context`` tokens, on persistent inputs."""
    dev = torch.device("cuda")
    table = torch.arange(batch * bt, dtype=I32, device=dev).view(batch, bt)
    pos = (context + torch.arange(rows, device=dev)).repeat(batch)
    seq = torch.arange(batch, device=dev).repeat_interleave(rows)
    slots = (table.long()[seq, pos // bs] * bs + pos % bs).to(I32)
    kv_lens = torch.full((batch,), context + rows, dtype=I32, device=dev)
    qsl = (torch.arange(batch + 1, device=dev) * rows).to(I32)
    tokens = torch.randint(0, model.config.vocab_size, (batch * rows,), device=dev)
    read = (torch.arange(batch, device=dev) * rows).to(I32)
    write = torch.arange(batch * rows, device=dev, dtype=I32)

    def fn():
        return model(tokens, pos, slots, table, kv_lens, qsl, rows, state_read=read, state_write=write)[1]

    return fn


def bare(model, batches, width, context, bs, with_torch) -> list[dict]:
    bt = -(-(context + width + 1) // bs)
    out = []
    for b in batches:
        model.allocate_kv_cache(b * bt + 1, bs, block_table_width=bt)
        model.allocate_linear_state(b * width)
        verify_us, g_verify = time_graph(forward_fn(model, b, width, context, bs, bt))
        decode_us, g_decode = time_graph(forward_fn(model, b, 1, context, bs, bt))
        row = {
            "batch": b,
            "width": width,
            "verify_us": round(verify_us, 1),
            "decode_us": round(decode_us, 1),
            "verify_over_decode": round(verify_us / decode_us, 3),
            "kernels_verify": kernels_in(g_verify),
            "kernels_decode": kernels_in(g_decode),
        }
        del g_verify, g_decode
        if with_torch and b == 1:
            model.hybrid_kernels = "torch"
            try:
                row["torch_verify_us"] = round(time_graph(forward_fn(model, b, width, context, bs, bt), 10, 5)[0], 1)
            finally:
                model.hybrid_kernels = "auto"
        print(json.dumps(row), flush=True)
        out.append(row)
    return out


def _args(fam: str, batch: int, width: int, bt: int, bs: int, g, dev) -> list[torch.Tensor]:
    vals = {
        "last_tokens": torch.randint(0, 50, (batch,), generator=g, dtype=I32),
        "draft_tokens": torch.randint(0, 50, (batch, width - 1), generator=g, dtype=I32),
        "seq_lens": torch.randint(0, bt * bs - width - 1, (batch,), generator=g, dtype=I32),
        "block_table": torch.randint(0, 4096, (batch, bt), generator=g, dtype=I32),
        "accepted": torch.randint(0, width, (batch,), generator=g, dtype=I32),
        "state_slots": torch.arange(batch * width, dtype=I32).view(batch, width),
    }
    return [
        (torch.full(shape_of(a, batch, width, bt), -777, dtype=I32) if a.output else vals[a.name]).to(dev)
        for a in FAMILIES[fam].args
    ]


def head_member(lib, batches, width, bt=64, bs=128) -> list[dict]:
    dev = torch.device("cuda")
    out = []
    for b in batches:
        g = torch.Generator().manual_seed(b)
        plain = lib.get("spec_verify_head_update", width, bt, bs)
        hybrid = lib.get("spec_verify_hybrid_head_update", width, bt, bs)
        a_plain = _args("spec_verify_head_update", b, width, bt, bs, g, dev)
        a_hybrid = _args("spec_verify_hybrid_head_update", b, width, bt, bs, g, dev)

        def run_plain():
            for _ in range(ALONE):
                plain(*a_plain)

        def run_hybrid():
            for _ in range(ALONE):
                hybrid(*a_hybrid)

        p = time_graph(run_plain, 20)[0] / ALONE
        h = time_graph(run_hybrid, 20)[0] / ALONE
        row = {"batch": b, "width": width, "head_us": round(p, 3), "hybrid_head_us": round(h, 3)}
        row["linear_member_us"] = round(h - p, 3)
        print(json.dumps(row), flush=True)
        out.append(row)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen3.5-2b")
    p.add_argument("--batch", default="1,8,32")
    p.add_argument("--width", type=int, default=4)
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--kernels", default=None, help="a built folder with the cuda head variants (bt64 bs128)")
    p.add_argument("--torch", action="store_true", help="also time the torch forward at B = 1")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    batches = [int(x) for x in args.batch.split(",")]
    torch.manual_seed(0)
    model = Qwen35Model.create(args.model, seed=0, dtype=torch.bfloat16, device="cuda")
    result = {
        "command": "python " + " ".join([os.path.relpath(__file__)] + (argv or sys.argv[1:])),
        "device": torch.cuda.get_device_name(),
        "model": args.model,
        "context": args.context,
        "bare": bare(model, batches, args.width, args.context, args.block_size, args.torch),
    }
    if args.kernels:
        result["head_member"] = head_member(load_library(args.kernels), batches, args.width)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
