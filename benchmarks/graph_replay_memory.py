"""Device memory before each fast step of test_cuda_graph_replay's runtime, run alone, and the allocations
that appeared or went since the step before (from the allocator's history).

    python3 benchmarks/graph_replay_memory.py   # on a GPU; build/verify_test_kernels prebuilt
"""

import collections
import os
import sys

import torch

sys.path.insert(0, "tests/runtime")
import test_verify_graph as T  # noqa: E402

from specgen.runtime.library import load_library  # noqa: E402
from specgen.runtime.verify_graph import SpecVerifyRuntime  # noqa: E402

OURS = ("specgen", "test_", "graph_replay_memory")


def live() -> collections.Counter:
    """The allocated blocks by (size, the project's frames that allocated them)."""
    out = collections.Counter()
    for seg in torch.cuda.memory._snapshot()["segments"]:
        for b in seg["blocks"]:
            if b["state"] == "active_allocated":
                frames = [f for f in b.get("frames", []) if any(k in f["filename"] for k in OURS)]
                where = " <- ".join(f"{os.path.basename(f['filename'])}:{f['line']}:{f['name']}" for f in frames[:4])
                out[(b["size"], where)] += 1
    return out


def main() -> None:
    dev = torch.device("cuda")
    lib = load_library(os.environ.get("SPECGEN_TEST_CUDA_KERNELS", "build/verify_test_kernels"))
    rt = SpecVerifyRuntime(lib, T.model_forward, T.ON, T.W, max_batch=8, backend="cuda", device=dev)
    rt.capture_all()
    gen = torch.Generator().manual_seed(11)
    draft_stream = torch.cuda.Stream()
    torch.cuda.memory._record_memory_history(max_entries=100000)
    prev, last_live = None, None
    for i, B in enumerate([3, 8, 1, 3, 5, 3, 8, 1, 2, 3, 1]):
        last, drafts, seq_lens, table = T.inputs(B, gen)
        args = [t.to(dev) for t in (last, drafts, seq_lens, table)]
        ready = torch.cuda.Event()
        with torch.cuda.stream(draft_stream):
            ready.record(draft_stream)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        rt.step(*args, seq_len_bounds=(int(seq_lens.min()), int(seq_lens.max())), ready_event=ready)
        after = torch.cuda.memory_allocated()
        torch.cuda.synchronize()
        cur = live()
        print(f"step {i} B={B} before={before} after={after} delta_vs_prev={'-' if prev is None else before - prev}")
        if last_live is not None:
            for sign, diff in (("+", cur - last_live), ("-", last_live - cur)):
                for k, v in list(diff.items())[:8]:
                    print("  ", sign, v, k)
        last_live, prev = cur, before


if __name__ == "__main__":
    main()
