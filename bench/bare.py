"""Bench-only measurements of an engine's bare graphs: the draft graph and the target forward alone.

``bare_spans`` times them back to back with events, as a step's spans are
timed, so a mode's ``verify_span_us - bare verify`` is its draft-to-verify
boundary; ``forward_trace`` and ``bare_trace`` profile them (``work_trace`` any other part of a step) with
``torch.profiler`` for the kernel-level figures (``bench/profiler.py``).
Each restores the step buffers and the verify hidden states afterwards.
"""

from __future__ import annotations

from statistics import median

import torch

from ..engine.clock import stamp_factory
from ..engine.profiling import activities, chrome_trace, phase_name

__all__ = ["bare_spans", "bare_trace", "forward_trace", "work_trace"]


@torch.inference_mode()
def bare_spans(engine, repeats: int = 50) -> tuple[float, float]:
    """The draft graph and the bare verify graph back to back: medians of their spans (us).

    Each repeat replays the draft graph, then the target forward alone
    (captured), and times the draft (start -> end of the draft graph) and
    the span from the end of the draft to the end of the verification,
    exactly like a step's ``draft_us`` and ``verify_span_us``; so a mode's
    ``verify_span_us - bare verify`` is its draft-to-verify boundary
    (graph switches and launch gaps included on both sides).  Medians of
    ``repeats``.  The step buffers are restored afterwards; the KV entries
    written are the last verification's (same values) and the next
    draft's (which the next step writes again).
    """
    with engine.state_kept():
        return _time_bare(engine, repeats)


def _time_bare(engine, repeats: int) -> tuple[float, float]:
    cuda = engine.device.type == "cuda"
    stamp = stamp_factory(cuda)
    g = engine.graph(engine.forward_only)
    spans = []
    for _ in range(repeats):
        s0, s1, e = stamp(), stamp(), stamp()
        s0.record()
        engine.draft_graph()
        s1.record()
        g()
        e.record()
        spans.append((s0, s1, e))
    if cuda:
        torch.cuda.synchronize()
    return (
        median(s0.elapsed_time(s1) * 1e3 for s0, s1, _ in spans),
        median(s1.elapsed_time(e) * 1e3 for _, s1, e in spans),
    )


def forward_trace(engine) -> dict:
    """One replay of ``engine``'s bare target forward, captured as a graph, profiled alone (CUDA).

    The step buffers and verify hidden states are restored afterwards (the KV
    entries written are the last verification's, with the same values).
    """
    return work_trace(engine, lambda: engine.target_forward(engine.bufs))


@torch.inference_mode()  # the step buffers are inference tensors (made under the engine's run)
def work_trace(engine, fn) -> dict:
    """One replay of ``fn`` (work of ``engine``'s step over its step buffers: the target forward, the block
    draft's context projection), captured as a graph, profiled alone (CUDA); the step buffers and verify
    hidden states are restored afterwards (KV entries it writes get the values the last step wrote)."""
    with engine.state_kept():
        g = engine.graph(fn)
        torch.cuda.synchronize(engine.device)
        with torch.profiler.profile(activities=activities(engine.device)) as prof:
            g()
            torch.cuda.synchronize(engine.device)
        del g
    return chrome_trace(prof)


@torch.inference_mode()
def bare_trace(engine, repeats: int = 4) -> dict:
    """``repeats`` x (draft graph, then the bare verify graph), profiled with their phases marked (CUDA).

    The bare verify graph is ``forward_only`` captured alone, the same graph
    ``bare_spans`` times.  The step buffers and verify hidden states are
    restored afterwards.
    """
    with engine.state_kept():
        g = engine.graph(engine.forward_only)
        torch.cuda.synchronize(engine.device)
        with torch.profiler.profile(activities=activities(engine.device)) as prof:
            for i in range(repeats):
                with torch.profiler.record_function(phase_name("draft", i)):
                    engine.draft_graph()
                with torch.profiler.record_function(phase_name("verify", i)):
                    g()
            torch.cuda.synchronize(engine.device)
        del g
    return chrome_trace(prof)
