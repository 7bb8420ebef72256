"""Where the serving loop's host synchronizes on a GPU: every sync report with the specgen frames that led to it.

    python3 benchmarks/prefill_syncs.py [--kernels build/engine_test_kernels] [--requests 24] [--out syncs.json]

Runs the tiny target with its MTP head through ``ServingLoop`` (``specgen``, ``read_lag=1``, so a
prefill's token is read a step late) under ``torch.cuda.set_sync_debug_mode("warn")``, with the loop's own
sync counting switched off so that every report reaches this script.  Prints, per distinct call site (the
innermost specgen frames), how many reports it gave and one stack; the read-backs (waits on a copy's event)
are not reports.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import traceback
import warnings

import torch

import specgen
from specgen.engine.clock import SYNC_WARNING, SyncCount
from specgen.engine.serving import LengthDist, Workload
from specgen.engine.serving import decode as decode_module
from specgen.engine.serving import loop as loop_module
from specgen.engine.serving.loop import ServingLoop
from specgen.models import MTPHead, Qwen3Model
from specgen.runtime.library import load_library

ROOT = os.path.dirname(os.path.abspath(specgen.__file__))  # the package's own frames


@contextlib.contextmanager
def _uncounted(active: bool):
    yield SyncCount()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", default="build/engine_test_kernels")
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    model = Qwen3Model.create("tiny", seed=0, device="cuda")
    head = MTPHead.create(model, seed=1)
    loop = ServingLoop(
        model,
        head,
        mode="specgen",
        depth=3,
        max_batch=6,
        num_blocks=24,
        block_size=16,
        block_table_width=8,
        max_prefill_tokens=16,
        kernels=load_library(args.kernels),
        read_lag=1,
    )
    wl = Workload(
        num_requests=args.requests,
        rate=None,
        prompt_len=LengthDist.uniform(1, 40),
        output_len=LengthDist.uniform(1, 24),
        vocab=model.config.vocab_size,
        seed=7,
    )
    sites: dict = collections.Counter()
    stacks: dict = {}

    def hook(message, category, filename, lineno, file=None, line=None):
        if SYNC_WARNING not in str(message):
            return
        frames = [f for f in traceback.extract_stack()[:-1] if os.path.abspath(f.filename).startswith(ROOT)]
        key = " <- ".join(
            f"{f.filename.rsplit('/', 2)[-2]}/{f.filename.rsplit('/', 1)[-1]}:{f.lineno}" for f in frames[::-1][:3]
        )
        sites[key] += 1
        stacks.setdefault(key, "".join(traceback.format_list(frames[-8:])))

    loop_module.count_host_syncs = decode_module.count_host_syncs = _uncounted
    warnings.showwarning = hook
    warnings.simplefilter("always")
    torch.cuda.set_sync_debug_mode("warn")
    try:
        run = loop.run(wl.requests())
    finally:
        torch.cuda.set_sync_debug_mode(0)
    m = run.metrics()
    print(
        f"{m['finished']} of {m['requests']} requests, {m['decode_steps']} steps, {run.prefill_chunks} prefill chunks"
    )
    for key, n in sites.most_common():
        print(f"{n:6d}  {key}\n{stacks[key]}")
    if not sites:
        print("no synchronizing call")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(
                {"sites": dict(sites), "stacks": stacks, "steps": m["decode_steps"], "chunks": run.prefill_chunks},
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
