"""What a served request must emit: its plain greedy tokens, cut at its first stop token."""

from __future__ import annotations

__all__ = ["cut_at_stop"]


def cut_at_stop(tokens, stop_ids) -> list[int]:
    """A request's output from its greedy tokens (its budget long): up to and including the first stop token."""
    out = []
    for t in tokens:
        out.append(t)
        if t in stop_ids:
            break
    return out
