"""Device memory around each phase of a few verify-runtime steps (GPU): where test_cuda_graph_replay's
reference drifts.  Run on the H200 as  python3 benchmarks/alloc_per_step.py  with build/verify_test_kernels
(specgen build --target cuda --widths 4 --block-table-widths 8 --block-sizes 16 --out build/verify_test_kernels).
"""
import os, sys, torch, gc
sys.path.insert(0, "tests/runtime")
from specgen.runtime.library import load_library
from specgen.runtime.verify_graph import SpecVerifyRuntime
from specgen.runtime.capabilities import SpeculativeVerifyCapabilities
W, BT, BS, VOCAB = 4, 8, 16, 50
I32 = torch.int32
ON = SpeculativeVerifyCapabilities(supports_in_graph_input_update=True, block_size=BS, block_table_width=BT)
def model_forward(bufs):
    tokens, positions = bufs["tokens"].long(), bufs["positions"].long()
    return ((tokens * 7 + positions) % VOCAB).to(I32).view(-1, W)
lib = load_library("build/verify_test_kernels")
dev = torch.device("cuda")
rt = SpecVerifyRuntime(lib, model_forward, ON, W, max_batch=8, backend="cuda", device=dev)
rt.capture_all()
gen = torch.Generator().manual_seed(11)
m = torch.cuda.memory_allocated
for i, B in enumerate([3, 8, 1, 3, 5, 3]):
    last = torch.randint(0, VOCAB, (B,), generator=gen, dtype=I32)
    seq = torch.randint(0, 101, (B,), generator=gen, dtype=I32)
    table = torch.randint(1, 64, (B, BT), generator=gen, dtype=I32)
    drafts = torch.randint(0, VOCAB, (B, W - 1), generator=gen, dtype=I32)
    torch.cuda.synchronize(); a0 = m()
    dl, dd, ds, dt = (t.to(dev) for t in (last, drafts, seq, table))
    torch.cuda.synchronize(); a1 = m()
    res = rt.step(dl, dd, ds, dt, seq_len_bounds=(int(seq.min()), int(seq.max())))
    a2 = m()
    torch.cuda.synchronize(); a3 = m()
    host = rt.host_result(0)
    gc.collect(); a4 = m()
    print(i, B, "start", a0, "inputs", a1 - a0, "step", a2 - a1, "sync", a3 - a2, "gc", a4 - a3, flush=True)
