r"""Check every built cuda variant against the families' torch semantics, then time the graph-head updates.

    python benchmarks/head_updates.py --kernels build/head_kernels \
        --out benchmarks/results/performance/head_updates.json

(``build/head_kernels``: ``specgen build --target cuda --widths 2-16 --block-table-widths 64
--block-sizes 128 --draft-dtypes int32 --families spec_verify_head_update,spec_verify_token_update,
spec_verify_metadata_update,spec_verify_attention_tiling_update --out build/head_kernels``.)

For each width and batch: a CUDA graph holding a stand-in target forward
(a fixed matmul) is timed alone, with the three head updates (token,
metadata, attention tiling) captured in front of it as three launches, and
with the composite ``spec_verify_head_update`` (one launch, what the
fuse-chain pass plans); the differences are what the updates add per step.
``fused_head_alone_us`` is the composite's own device time: a graph of
``ALONE`` launches back to back, divided by ``ALONE``.  Medians of repeated
replays, all graphs in the same run; every width the folder has, batches
1 to 256.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from specgen.engine.clock import replay_us
from specgen.engine.graphs import CapturedGraph
from specgen.runtime.library import load_library
from specgen.runtime.semantics import SEMANTICS, semantics_kwargs
from specgen.specializations.families import DEFAULT_NUM_SPLITS, FAMILIES, shape_of


def _inputs(fam, W, BT, BS, B, dtype, g, dev):
    cap = BT * BS
    seq = torch.randint(0, cap - W, (B,), generator=g, dtype=torch.int32)
    seq[: B // 2] = torch.tensor([0, BS - 1, BS, cap - W] * B, dtype=torch.int32)[: B // 2]
    drafts = torch.randint(0, 50, (B, W - 1), generator=g)
    acc = torch.randint(0, W, (B,), generator=g, dtype=torch.int32)
    target = torch.randint(50, 100, (B, W), generator=g, dtype=torch.int32)
    for b in range(B):
        target[b, : acc[b]] = drafts[b, : acc[b]].to(torch.int32)
    vals = {
        "seq_lens": seq,
        "block_table": torch.randint(0, 4096, (B, BT), generator=g, dtype=torch.int32),
        "last_tokens": torch.randint(0, 50, (B,), generator=g, dtype=torch.int32),
        "draft_tokens": drafts.to(getattr(torch, dtype)) if FAMILIES[fam].has_draft_dtype else drafts.int(),
        "target_tokens": target,
        "accepted": acc,
        "scratch_slot": torch.tensor([4096 * BS], dtype=torch.int32),
    }
    out = []
    for a in FAMILIES[fam].args:
        t = torch.full(shape_of(a, B, W, BT), -777, dtype=torch.int32) if a.output else vals[a.name]
        out.append(t.to(dev))
    return out


def check_all(lib, dev) -> dict:
    g = torch.Generator().manual_seed(0)
    results = {}
    for e in lib.entries():
        if e.target != "cuda":
            continue
        ok = True
        for B in (1, 2, 63, 64, 255, 256):
            W, BT, BS = e.width, e.block_table_width or 8, e.block_size or 16
            args = _inputs(e.family, W, BT, BS, B, e.draft_dtype, g, dev)
            want = [t.clone() for t in args]
            SEMANTICS[e.family](*want, **semantics_kwargs(e.family, BS, e.num_splits or DEFAULT_NUM_SPLITS))
            lib.get(e.family, W, e.block_table_width, e.block_size)(*args)
            ok &= all(torch.equal(a, b) for a, b in zip(args, want))
        results[e.key] = ok
    torch.cuda.synchronize()
    return results


def time_graph(fn, replays=200, repeats=15) -> float:
    """``fn`` captured in a CUDA graph (one warm-up run outside it), then the median us per replay."""
    graph = CapturedGraph(fn, torch.device("cuda"), warmup=1)
    return replay_us(graph, repeats, replays)


ALONE = 20
BATCHES = (1, 8, 32, 64, 128, 256)


def head_cost(lib, dev, W, B) -> dict:
    g = torch.Generator().manual_seed(W * 1000 + B)
    tok = _inputs("spec_verify_token_update", W, 64, 128, B, "int32", g, dev)
    meta = _inputs("spec_verify_metadata_update", W, 64, 128, B, "int32", g, dev)
    til = _inputs("spec_verify_attention_tiling_update", W, 64, 128, B, "int32", g, dev)
    k_tok = lib.get("spec_verify_token_update", W)
    k_meta = lib.get("spec_verify_metadata_update", W, 64, 128)
    k_til = lib.get("spec_verify_attention_tiling_update", W, None, 128)
    fused = _inputs("spec_verify_head_update", W, 64, 128, B, "int32", g, dev)
    k_fused = lib.get("spec_verify_head_update", W, 64, 128)
    x = torch.randn(B * W, 1024, device=dev, dtype=torch.bfloat16)
    w = torch.randn(1024, 1024, device=dev, dtype=torch.bfloat16)

    def forward():
        y = x
        for _ in range(8):
            y = y @ w
        return y

    def with_head():
        k_tok(*tok)
        k_meta(*meta)
        k_til(*til)
        return forward()

    def with_fused_head():
        k_fused(*fused)
        return forward()

    def fused_alone():
        for _ in range(ALONE):
            k_fused(*fused)

    bare = time_graph(forward, replays=100)
    head = time_graph(with_head, replays=100)
    one = time_graph(with_fused_head, replays=100)
    alone = time_graph(fused_alone, replays=20) / ALONE
    return {
        "width": W,
        "batch": B,
        "bare_graph_us": round(bare, 3),
        "with_head_us": round(head, 3),
        "head_updates_us": round(head - bare, 3),
        "with_fused_head_us": round(one, 3),
        "fused_head_update_us": round(one - bare, 3),
        "fused_head_alone_us": round(alone, 3),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", default="build/specgen_kernels")
    ap.add_argument("--out", default="benchmarks/results/performance/head_updates.json")
    args = ap.parse_args(argv)
    dev = torch.device("cuda")
    lib = load_library(args.kernels)
    checks = check_all(lib, dev)
    widths = sorted(
        {
            e.width
            for e in lib.entries()
            if e.target == "cuda"
            and e.family == "spec_verify_head_update"
            and e.block_table_width == 64
            and e.block_size == 128
        }
    )
    timings = [head_cost(lib, dev, W, B) for W in widths for B in BATCHES]
    report = {
        "command": "python " + " ".join(sys.argv),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "variants_checked": checks,
        "all_match": all(checks.values()),
        "head_update_timings": timings,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(json.dumps({"all_match": report["all_match"], "n": len(checks)}))
    for t in timings:
        print(t)
    worst = max(timings, key=lambda t: t["fused_head_alone_us"])
    print(
        f"widths {widths[0]}..{widths[-1]}, batches {BATCHES[0]}..{BATCHES[-1]}: composite head at most "
        f"{worst['fused_head_alone_us']} us alone (W={worst['width']}, B={worst['batch']}), at most "
        f"{max(t['fused_head_update_us'] for t in timings)} us in front of the forward"
    )
    return 0 if report["all_match"] else 1


if __name__ == "__main__":
    sys.exit(main())
