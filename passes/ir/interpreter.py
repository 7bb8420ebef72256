"""The reference interpreter: runs any boundary graph on the CPU with torch.

Ops run in program order through their reference semantics.  For a
race-free graph every legal device schedule gives the same values, so this
sequential run is the definition of what a graph computes, and "before" and
"after" a pass are compared value for value.  ``schedule.py`` runs the same
ops in the other orders the streams, events and syncs allow.
"""

from __future__ import annotations

from typing import Mapping, MutableMapping, Sequence

import torch

from .core import BoundaryGraph, BoundaryGraphError, Op, OpKind, Value
from .op_semantics import VOCAB

_COPIES = {OpKind.H2D, OpKind.D2H}
NO_EFFECT = frozenset({OpKind.EVENT_RECORD, OpKind.EVENT_WAIT, OpKind.HOST_SYNC})


def random_inputs(graph: BoundaryGraph, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random inputs respecting the boundary's layout (positions fit the block table)."""
    gen = torch.Generator().manual_seed(seed)
    p = graph.params
    W, BS, BT = p.get("width", 2), p.get("block_size", 16), p.get("block_table_width", 4)
    num_blocks = p.get("num_blocks", max(BT * p.get("batch", 1), 1))
    max_seq = max(BT * BS - W, 0)

    def draw(v: Value) -> torch.Tensor:
        dtype = getattr(torch, v.dtype)
        shape = tuple(int(s) for s in v.shape)
        if v.init == "seq_len":
            return torch.randint(0, max_seq + 1, shape, generator=gen).to(dtype)
        if v.init == "block_table":
            return torch.randint(0, num_blocks, shape, generator=gen).to(dtype)
        if v.init == "scratch_slot":
            return torch.full(shape, num_blocks * BS, dtype=dtype)
        if v.init in ("token", "state_slot"):
            return torch.randint(0, VOCAB, shape, generator=gen).to(dtype)
        if v.init == "rand":
            return torch.randint(-50, 50, shape, generator=gen).to(dtype)
        if v.init == "prob":  # a probability (the draft's q(x), top-p)
            return torch.rand(shape, generator=gen).to(dtype)
        if v.init == "temperature":  # a third of the rows greedy
            t = torch.rand(shape, generator=gen) * 1.5
            return torch.where(torch.rand(shape, generator=gen) < 1 / 3, torch.zeros_like(t), t).to(dtype)
        if v.init == "top_k":
            return torch.randint(0, VOCAB, shape, generator=gen).to(dtype)
        if v.init == "seed":
            return torch.randint(-(2**62), 2**62, shape, generator=gen).to(dtype)
        return torch.zeros(shape, dtype=dtype)

    return {k: draw(v) for k, v in graph.values.items() if v.is_input}


def execute(graph: BoundaryGraph, o: Op, env: MutableMapping[str, torch.Tensor]) -> None:
    """Run one op on ``env`` (its reads in, its writes out); events and syncs change no value."""
    if o.kind in NO_EFFECT:
        return
    if o.fn is None:
        if o.kind not in _COPIES:
            raise BoundaryGraphError(f"{graph.name}: op '{o.name}' has no reference semantics", op=o.name)
        outs = tuple(env[r].clone() for r in o.reads)
    else:
        outs = o.fn(*(env[r] for r in o.reads))
    if len(outs) != len(o.writes):
        raise BoundaryGraphError(
            f"{graph.name}: op '{o.name}' produced {len(outs)} values for {len(o.writes)} writes", op=o.name
        )
    for name, t in zip(o.writes, outs):
        want = graph.values[name]
        if tuple(t.shape) != tuple(int(s) for s in want.shape):
            raise BoundaryGraphError(
                f"{graph.name}: op '{o.name}' wrote '{name}' with shape {tuple(t.shape)}, declared {tuple(want.shape)}",
                op=o.name,
            )
        env[name] = t.to(getattr(torch, want.dtype))


def interpret(graph: BoundaryGraph, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Run ``graph``; returns the final value of every value it defines."""
    env = {k: t.clone() for k, t in inputs.items()}
    for o in graph.ops:
        execute(graph, o, env)
    return env


def differing(names: Sequence[str], want: Mapping[str, torch.Tensor], got: Mapping[str, torch.Tensor]) -> list[str]:
    """The ``names`` whose value in ``got`` is missing or differs from ``want``'s (the one comparison)."""
    return [n for n in names if n not in got or not torch.equal(want[n], got[n])]


def outputs_equal(a: BoundaryGraph, b: BoundaryGraph, seed: int = 0) -> list[str]:
    """Names of ``a``'s outputs whose values differ when both graphs run on the same inputs."""
    inputs = random_inputs(a, seed)
    return differing(a.outputs, interpret(a, inputs), interpret(b, inputs))
