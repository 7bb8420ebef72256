"""The verify graph on CUDA at length: every bucket of the default build replayed thousands of times (the soak), and
the capture time of all buckets."""

from __future__ import annotations

import os

import pytest
import torch
from oracles.verify_step import (
    I32,
    VOCAB,
    make_drafts,
    reference_step,
)

from specgen.runtime.capabilities import SpeculativeVerifyCapabilities
from specgen.runtime.library import load_library
from specgen.runtime.verify_graph import SpecVerifyRuntime


def _default_cuda_library(tmp_path):
    """The default matrix's cuda variants (w4/5/6, bt64, bs128): prebuilt on the GPU machine, else built here."""
    prebuilt = os.environ.get("SPECGEN_TEST_CUDA_DEFAULT_KERNELS")
    if prebuilt:
        return load_library(prebuilt)
    from specgen.driver import plan_and_build as build
    from specgen.specializations import DEFAULT

    # the plans fuse the three head updates into spec_verify_head_update, so that one is built too
    build(
        DEFAULT,
        ("cuda",),
        out=tmp_path,
        jobs=2,
        progress=None,
        families=(
            "spec_verify_token_update",
            "spec_verify_metadata_update",
            "spec_verify_attention_tiling_update",
            "spec_verify_head_update",
            "greedy_prefix_verify",
            "prepare_next_draft",
        ),
    )
    return load_library(tmp_path)


def _forward_for(width):
    def fwd(bufs):
        tokens, positions = bufs["tokens"].long(), bufs["positions"].long()
        return ((tokens * 7 + positions) % VOCAB).to(I32).view(-1, width)

    return fwd


SOAK_STEPS = int(os.environ.get("SPECGEN_SOAK_STEPS", "10000"))


@pytest.mark.gpu
@pytest.mark.parametrize("width", [4, 5, 6])
def test_cuda_soak_replays(tmp_path, width):
    """SOAK_STEPS replays over every bucket and acceptance length: exact, sync-free, allocation-free."""
    lib = _default_cuda_library(tmp_path)
    dev = torch.device("cuda")
    bt, bs, max_batch = 64, 128, 64
    caps = SpeculativeVerifyCapabilities(supports_in_graph_input_update=True, block_size=bs, block_table_width=bt)
    rt = SpecVerifyRuntime(lib, _forward_for(width), caps, width, max_batch=max_batch, backend="cuda", device=dev)
    rt.capture_all()
    gen = torch.Generator().manual_seed(100 + width)
    chunk = 500
    seen_accept = torch.zeros(width, dtype=torch.long)
    buckets_hit = set()
    checked = 0
    while checked < SOAK_STEPS:
        n = min(chunk, SOAK_STEPS - checked)
        batches = torch.randint(1, max_batch + 1, (n,), generator=gen).tolist()
        # inputs for the whole chunk, made on the host and moved before the sync-checked loop
        cases = []
        for B in batches:
            last = torch.randint(0, VOCAB, (B,), generator=gen, dtype=I32)
            top = bt * bs - width - 1  # the largest length every guard allows (prepare_next_draft: S + W + 1 <= BT*BS)
            seq_lens = torch.randint(0, top + 1, (B,), generator=gen, dtype=I32)
            if torch.rand(1, generator=gen).item() < 0.1:
                seq_lens[0] = top
            table = torch.randint(1, 4096, (B, bt), generator=gen, dtype=I32)
            p = [0.0, 0.5, 0.9, 1.0][int(torch.randint(0, 4, (1,), generator=gen))]
            drafts = make_drafts(last, seq_lens, gen, p, width)
            cases.append((last, drafts, seq_lens, table))
        dev_cases = [tuple(t.to(dev) for t in c) for c in cases]
        hist_acc = torch.full((n, max_batch), -1, dtype=I32, device=dev)
        hist_next = torch.full((n, max_batch, width), -1, dtype=I32, device=dev)
        hist_len = torch.full((n, max_batch), -1, dtype=I32, device=dev)
        hist_slots = torch.full((n, max_batch, 2), -1, dtype=I32, device=dev)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()  # this chunk's inputs and histories included
        torch.cuda.set_sync_debug_mode("error")
        try:
            for i, (c, B) in enumerate(zip(dev_cases, batches)):
                lo, hi = int(cases[i][2].min()), int(cases[i][2].max())
                res = rt.step(*c, seq_len_bounds=(lo, hi))
                hist_acc[i, :B].copy_(res.accepted)
                hist_next[i, :B].copy_(res.next_tokens)
                hist_len[i, :B].copy_(res.next_seq_lens)
                hist_slots[i, :B].copy_(res.draft_slots)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        torch.cuda.synchronize()
        assert torch.cuda.memory_allocated() == before, "a replay allocated device memory"
        acc, nxt, ln, sl = (t.cpu() for t in (hist_acc, hist_next, hist_len, hist_slots))
        for i, (c, B) in enumerate(zip(cases, batches)):
            exp = reference_step(*c, block_size=bs, width=width)
            assert torch.equal(acc[i, :B], exp["accepted"]), (checked + i, B)
            assert torch.equal(nxt[i, :B], exp["next_tokens"]), (checked + i, B)
            assert torch.equal(ln[i, :B], exp["next_seq_lens"]), (checked + i, B)
            assert torch.equal(sl[i, :B], exp["draft_slots"]), (checked + i, B)
            seen_accept += torch.bincount(exp["accepted"].long(), minlength=width)
            buckets_hit.add(rt._bucket(B))
        checked += n
    stats = rt.stats()
    assert stats["fast_path"] == SOAK_STEPS and stats["fallback"] == {} and stats["device_guard"] == {}
    assert (seen_accept > 0).all(), seen_accept  # every acceptance length 0 .. W-1 occurred
    assert buckets_hit == set(rt.buckets)
    print(
        f"soak w{width}: {SOAK_STEPS} replays exact; accepted-length histogram {seen_accept.tolist()}; "
        f"buckets {sorted(buckets_hit)}; memory_allocated unchanged across every chunk of replays"
    )


@pytest.mark.gpu
def test_cuda_capture_time_all_buckets(tmp_path):
    """Capturing every bucket (1..64) for widths 4, 5, 6 takes under 2 s in total."""
    import time

    lib = _default_cuda_library(tmp_path)
    dev = torch.device("cuda")
    caps = SpeculativeVerifyCapabilities(supports_in_graph_input_update=True, block_size=128, block_table_width=64)
    rts = [
        SpecVerifyRuntime(lib, _forward_for(w), caps, w, max_batch=64, backend="cuda", device=dev) for w in (4, 5, 6)
    ]
    torch.cuda.synchronize()
    t = time.perf_counter()
    for rt in rts:
        rt.capture_all()
    torch.cuda.synchronize()
    took = time.perf_counter() - t
    n = sum(len(rt.buckets) for rt in rts)
    print(f"captured {n} buckets (widths 4, 5, 6; batches {rts[0].buckets}) in {took:.3f} s")
    assert n == 21
    assert took < 2.0
