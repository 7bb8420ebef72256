"""Synthetic profiler traces for the kernel-timeline tests: Chrome-trace events, and decode steps of a draft graph
then a verify graph with known gaps."""

from __future__ import annotations

from specgen.bench import kernel_timeline as kt

FORWARD = ["embed", "gemm", "attn", "gemm", "lm_head"]


def event(cat, name, ts, dur, corr=None, tid=1):
    e = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": tid}
    if corr is not None:
        e["args"] = {"correlation": corr}
    return e


def steps_trace(steps=3, head=2.0, d2v_idle=5.0, v2d=30.0, draft_kernels=3):
    """``steps`` decode steps: a draft graph, then a verify graph (head kernel + forward)."""
    ev, t, corr = [], 1000.0, 1
    expect = []
    for k in range(steps):
        # draft phase: one graph launch on the host, its kernels on the device
        ev.append(event("user_annotation", kt.phase_name("draft", k), t, 8.0))
        ev.append(event("cuda_runtime", "cudaGraphLaunch", t + 1, 3, corr))
        dev = t + 10
        for j in range(draft_kernels):
            ev.append(event("kernel", f"draft_{j}", dev, 4.0, corr))
            dev += 5.0
        draft_end = dev - 1.0
        corr += 1
        # verify phase: another launch; the head kernel, then the forward
        ev.append(event("user_annotation", kt.phase_name("verify", k), t + 9, 6.0))
        ev.append(event("cuda_runtime", "cudaGraphLaunch", t + 10, 3, corr))
        dev = draft_end + d2v_idle
        ev.append(event("kernel", "spec_head_w4", dev, head, corr))
        dev += head
        fwd_start = dev
        for name in FORWARD:
            ev.append(event("kernel", name, dev, 10.0, corr))
            dev += 10.0
        ev.append(event("kernel", "greedy_verify", dev, 1.0, corr))
        fwd_end = dev
        corr += 1
        expect.append((fwd_start - draft_end, head, fwd_end))
        t = fwd_end + v2d - 10  # the next draft launches so its first kernel starts at fwd_end + v2d
    return {"traceEvents": ev}, expect
