"""The greedy token of R rows of V logits, as the verify graph takes it: ``torch.argmax`` then the casting
copy into an int32 buffer (what ran before ``triton_argmax``), against ``triton_argmax.argmax_rows`` writing
the int32 buffer; each captured in a CUDA graph of 20 calls, medians of 15 replays timed by CUDA events.
Usage: ``python benchmarks/argmax_speed.py [--vocab 151936] [--rows 1,4,8,32,128] [--out F.json]``."""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from specgen.models.triton_argmax import argmax_rows

CALLS, REPEATS = 20, 15


def time_us(fn) -> float:
    """Median us per call of ``fn`` over graph replays of ``CALLS`` calls."""
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(CALLS):
            fn()
    times = []
    for _ in range(REPEATS):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000 / CALLS)
    return round(statistics.median(times), 2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--rows", default="1,4,8,32,128")
    ap.add_argument("--out")
    a = ap.parse_args()
    res = []
    for R in (int(r) for r in a.rows.split(",")):
        x = (torch.randn(R, a.vocab, device="cuda") * 4).to(torch.bfloat16)
        out = torch.empty(R, dtype=torch.int32, device="cuda")
        ref = x.argmax(-1)
        assert torch.equal(argmax_rows(x, out).long(), ref)
        torch_us = time_us(lambda: out.copy_(x.argmax(-1)))
        triton_us = time_us(lambda: argmax_rows(x, out))
        res.append({"rows": R, "vocab": a.vocab, "torch_argmax_and_cast_us": torch_us, "argmax_rows_us": triton_us})
        print(json.dumps(res[-1]), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"command": "python benchmarks/argmax_speed.py", "results": res}, f, indent=1)


if __name__ == "__main__":
    main()
