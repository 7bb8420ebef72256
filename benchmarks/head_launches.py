"""Launch the composite head kernel for a few (width, batch) cases, for a profiler to look at.

    ncu --kernel-name regex:spec_verify_head_update --section SpeedOfLight --section WarpStateStats \
        python benchmarks/head_launches.py --kernels build/head_kernels --cases 5:1,6:1,12:256,13:256

Each case launches ``--launches`` times on the same inputs as ``benchmarks/head_updates.py``
(after one warm-up launch), then synchronizes; it prints the case order so the
profiler's kernel records can be matched to the cases.
"""

from __future__ import annotations

import argparse
import sys

import torch

from specgen.runtime.library import load_library

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from head_updates import _inputs  # noqa: E402  (the same inputs as the timing)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernels", required=True)
    p.add_argument("--cases", default="5:1,6:1,12:256,13:256", help="comma list of WIDTH:BATCH")
    p.add_argument("--launches", type=int, default=2)
    a = p.parse_args(argv)
    dev = torch.device("cuda")
    lib = load_library(a.kernels)
    for case in a.cases.split(","):
        W, B = (int(x) for x in case.split(":"))
        g = torch.Generator().manual_seed(W * 1000 + B)
        args = _inputs("spec_verify_head_update", W, 64, 128, B, "int32", g, dev)
        k = lib.get("spec_verify_head_update", W, 64, 128)
        for _ in range(1 + a.launches):
            k(*args)
        torch.cuda.synchronize()
        print(f"case W={W} B={B}: {1 + a.launches} launches", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
