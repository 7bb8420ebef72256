"""What a served request must emit (its plain greedy tokens, cut at its first stop token), and the churn
workloads the serving tests run."""

from __future__ import annotations

import collections

import torch

from specgen.engine import greedy_generate
from specgen.engine.serving import LengthDist, Workload

__all__ = ["churn_requests", "cut_at_stop", "frequent_tokens"]


def frequent_tokens(model, count: int = 2) -> frozenset[int]:
    """``count`` token ids the model's greedy decoding emits most often (frequent stop tokens)."""
    gen = torch.Generator().manual_seed(7)
    prompts = [torch.randint(0, model.config.vocab_size, (6,), generator=gen).tolist() for _ in range(12)]
    counts = collections.Counter(t for out in greedy_generate(model, prompts, 24) for t in out)
    return frozenset(t for t, _ in counts.most_common(count))


def churn_requests(model, stops, n: int, seed: int, rate: float | None):
    """``n`` requests with random arrivals (``rate`` per second; None: all at once), prompts of 1-24 tokens,
    budgets of 1-28, stopping at ``stops``."""
    reqs = Workload(
        num_requests=n,
        rate=rate,
        prompt_len=LengthDist.uniform(1, 24),
        output_len=LengthDist.uniform(1, 28),
        vocab=model.config.vocab_size,
        seed=seed,
    ).requests()
    for r in reqs:
        r.stop_ids = stops
    return reqs


def cut_at_stop(tokens, stop_ids) -> list[int]:
    """A request's output from its greedy tokens (its budget long): up to and including the first stop token."""
    out = []
    for t in tokens:
        out.append(t)
        if t in stop_ids:
            break
    return out
