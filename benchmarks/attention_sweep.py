"""The Triton paged attention's launch choices measured against each other: time and error per tiling.

    python3 benchmarks/attention_sweep.py --dtype float32 --out attention_sweep.json

Shapes (Qwen3-0.6B heads: 16 query heads over 8 KV heads of 128): a prefill chunk of ``--prefill-rows`` rows
from position 0 (one sequence), and verify steps of ``--verify-batch`` sequences of 4 rows each over
``--verify-keys`` keys.  For every tiling (``triton_attention.Tiling``: query rows per program, keys per
chunk, warps, stages, the float32 dot's precision) and every shape: the median time over ``--repeats``
launches after a warm-up, and the largest difference from a float64 reference.  A tiling that fails to
compile is recorded with its error.  Prints a table per shape (fastest first); ``--out`` writes the JSON
with the command.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys

import torch
import torch.nn.functional as F

from specgen.engine.clock import median_wall_us
from specgen.models.triton_attention import Tiling, paged_attention

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class Shape:
    """``B`` sequences of ``R`` query rows, the last ``R`` of ``lens[b]`` keys, in a paged cache."""

    def __init__(self, name, lens, R, H, KVH, D, BS, dtype, dev, seed=0):
        g = torch.Generator(device=dev).manual_seed(seed)
        B, self.name, self.R, self.lens = len(lens), name, R, lens
        width = -(-max(lens) // BS)
        self.bt = torch.arange(B * width, dtype=torch.int32, device=dev).reshape(B, width)  # block j of b
        slots = B * width * BS
        self.k = torch.randn(slots + 1, KVH, D, generator=g, device=dev, dtype=dtype)
        self.v = torch.randn(slots + 1, KVH, D, generator=g, device=dev, dtype=dtype)
        self.q = torch.randn(B * R, H, D, generator=g, device=dev, dtype=dtype)
        self.kv = torch.tensor(lens, dtype=torch.int32, device=dev)
        self.pos = torch.cat([torch.arange(n - R, n, device=dev) for n in lens])
        self.qsl = torch.arange(0, B * R + 1, R, dtype=torch.int32, device=dev)
        self.BS, self.G = BS, H // KVH
        self.ref = self._reference()

    def _reference(self) -> torch.Tensor:
        out = []
        for b, n in enumerate(self.lens):
            keys = (
                self.bt[b].long().repeat_interleave(self.BS) * self.BS
                + torch.arange(self.bt.shape[1] * self.BS, device=self.bt.device) % self.BS
            )
            k, v = (t[keys[:n]].double().transpose(0, 1)[None] for t in (self.k, self.v))
            q = self.q[b * self.R : (b + 1) * self.R].double().transpose(0, 1)[None]
            mask = torch.arange(n, device=q.device)[None] <= self.pos[b * self.R : (b + 1) * self.R, None]
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
            out.append(o[0].transpose(0, 1))
        return torch.cat(out)

    def run(self, tiling: Tiling) -> torch.Tensor:
        return paged_attention(
            self.q, self.k, self.v, self.bt, self.kv, self.pos, self.qsl, self.R, self.BS, tiling=tiling
        )


def tilings(args) -> list[Tiling]:
    grid = itertools.product(
        [int(x) for x in args.block_m.split(",")],
        [int(x) for x in args.block_n.split(",")],
        [int(x) for x in args.warps.split(",")],
        [int(x) for x in args.stages.split(",")],
        args.precision.split(","),
        [int(x) if x not in ("", "auto") else None for x in args.splits.split(",")],
    )
    return [Tiling(None, None, None, None, None, None)] + [
        Tiling(block_m=m, block_n=n, num_warps=w, num_stages=s, precision=p or None, splits=k)
        for m, n, w, s, p, k in grid
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    ap.add_argument("--prefill-rows", default="256,2048")
    ap.add_argument("--verify-batch", default="8,32")
    ap.add_argument("--verify-keys", default="1024", help="keys of the longest sequence; a list sweeps several")
    ap.add_argument("--heads", default="16,8,128", help="query heads, KV heads, head dim")
    ap.add_argument("--block-size", type=int, default=128)
    ap.add_argument("--block-m", default="16,32,64")
    ap.add_argument("--block-n", default="32,64")
    ap.add_argument("--warps", default="4,8")
    ap.add_argument("--stages", default="1,2")
    ap.add_argument("--precision", default="ieee", help="float32 dot precisions: ieee, tf32x3, tf32")
    ap.add_argument("--splits", default="auto", help="key splits per program (auto: paged_attention's choice)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    dev, dt = torch.device(args.device), DTYPES[args.dtype]
    H, KVH, D = (int(x) for x in args.heads.split(","))
    shapes = [Shape(f"prefill {n}", [n], n, H, KVH, D, args.block_size, dt, dev) for n in _ints(args.prefill_rows)]
    keys = _ints(args.verify_keys)
    for b, n in itertools.product(_ints(args.verify_batch), keys):
        lens = [n - n // 8 * (i % 7) for i in range(b)]  # unequal lengths, as a running batch has
        name = f"verify B={b} R=4" + (f" keys={n}" if len(keys) > 1 else "")
        shapes.append(Shape(name, lens, 4, H, KVH, D, args.block_size, dt, dev))
    results = []
    with torch.inference_mode():
        for t in tilings(args):
            row = {"tiling": {k: getattr(t, k) for k in Tiling.__dataclass_fields__}, "shapes": {}}
            for s in shapes:
                try:
                    err = (s.run(t).double() - s.ref).abs().max().item()
                    row["shapes"][s.name] = {
                        "us": round(median_wall_us(lambda s=s: s.run(t), dev, args.repeats), 1),
                        "max_err": err,
                    }
                except Exception as e:  # a tiling Triton cannot compile (shared memory, registers)
                    row["shapes"][s.name] = {"error": str(e).splitlines()[0][:160] if str(e) else type(e).__name__}
            results.append(row)
            print(json.dumps(row), flush=True)
    for s in shapes:
        ok = sorted((r for r in results if "us" in r["shapes"][s.name]), key=lambda r: r["shapes"][s.name]["us"])
        print(f"{s.name} ({args.dtype}): fastest of {len(ok)} tilings; default first")
        for r in results[:1] + [r for r in ok if r is not results[0]][:6]:
            m = r["shapes"][s.name]
            took = f"{m['us']:9.1f} us  err {m['max_err']:.1e}" if "us" in m else m["error"]
            print(f"    {took}  {r['tiling']}")
    if args.out:
        words = argv if argv is not None else sys.argv[1:]
        out = {"command": "python3 benchmarks/attention_sweep.py " + " ".join(words), "device": str(dev)}
        if dev.type == "cuda":
            out["gpu"] = torch.cuda.get_device_name(dev)
        out.update(dtype=args.dtype, results=results)
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


if __name__ == "__main__":
    sys.exit(main())
