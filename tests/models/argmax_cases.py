"""Cases of ``triton_argmax.argmax_rows`` against ``torch.argmax``; run as a script (``device``), prints JSON.

A child process, so ``TRITON_INTERPRET=1`` (the CPU) never leaks into a CUDA run.
"""

from __future__ import annotations

import json
import sys

import torch

from specgen.models.triton_argmax import BLOCK, argmax_rows


def edges(x: torch.Tensor) -> torch.Tensor:
    """Row 0: a tie of the maximum at index 3 and at the last index; row 1: zeros of both signs (``-0.0``
    first); row 2: NaNs after an ``inf``; row 3: all ``-inf``; row 4: the maximum at the last index alone."""
    R, V = x.shape
    if V < 8:
        return x
    rows = [
        lambda r: (r.__setitem__(3, r.max() + 1), r.__setitem__(V - 1, r[3])),
        lambda r: (r.fill_(0.0), r.__setitem__(0, -0.0), r.__setitem__(2, -0.0)),
        lambda r: (r.__setitem__(1, float("inf")), r.__setitem__(5, float("nan")), r.__setitem__(V - 2, float("nan"))),
        lambda r: r.fill_(float("-inf")),
        lambda r: r.__setitem__(V - 1, r.max() + 1),
    ]
    for i, f in enumerate(rows[:R]):
        f(x[i])
    return x


def main(device: str) -> dict:
    gen = torch.Generator().manual_seed(1)
    big = device == "cuda"
    vocab = [1, 7, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 5] + ([151936, 248320] if big else [])
    counts = [1, 5] + ([128] if big else [])
    checks, bad = 0, []
    for V in vocab:
        for R in counts:
            for dt in (torch.float32, torch.bfloat16, torch.float16):
                x = edges((torch.randn(R, V, generator=gen) * 4).to(dt)).to(device)
                ref = x.argmax(-1)
                for od in (torch.int32, torch.int64, None):
                    out = None if od is None else torch.full((R,), -7, dtype=od, device=device)
                    got = argmax_rows(x, out)
                    checks += 1
                    if got.dtype != (od or torch.int64) or not torch.equal(got.long(), ref):
                        bad.append([V, R, str(dt), str(od)])
                    if out is not None and got.data_ptr() != out.data_ptr():
                        bad.append([V, R, str(dt), "not written in place"])
    # a strided row view (an MTP step's second row) and a 3-D batch
    y = torch.randn(4, 2, 9000, generator=gen).to(device)[:, 1]
    z = torch.randn(2, 3, 5000, generator=gen).to(device)
    for t in (y, z):
        checks += 1
        if not torch.equal(argmax_rows(t), t.argmax(-1)):
            bad.append(["view", list(t.shape)])
    errors = 0
    for wrong in (torch.empty(3, dtype=torch.float32), torch.empty(2, dtype=torch.int32)):
        try:
            argmax_rows(torch.randn(3, 10).to(device), wrong.to(device))
        except ValueError:
            errors += 1
    return {"checks": checks, "bad": bad, "errors": errors}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
