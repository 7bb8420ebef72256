"""Run-time checks: guard expressions of a variant and the tensors of a launch.

A variant is specialized under assumptions (``max_seq_len <= 8188`` because
``S + W <= BT * BS``); the build writes them into the manifest as guard
expressions.  They are evaluated by the one expression evaluator,
``specializations/expr.py`` (``safe_eval``): a small AST walker over integer
literals, a fixed set of names, ``+ - * //``, comparisons and
``and/or/not``.  Nothing else parses, so a tampered manifest cannot run code::

    >>> check_guards([("max_seq_len <= 8188", "S + W <= BT * BS")],
    ...              min_seq_len=0, max_seq_len=9000, batch=4).failed
    [('max_seq_len <= 8188', 'S + W <= BT * BS')]

The same evaluator reads the manifest's shape expressions (``(B * W,)``), and
``check_tensors`` refuses a launch whose tensors do not match the variant.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from ..specializations.expr import (
    GUARD_NAMES,
    SHAPE_NAMES,
    UnsafeExpressionError,
    bare_axis,
    eval_shape,
    safe_eval,
    validate_expression,
)
from ..specializations.families import MIN_WIDTH

__all__ = [
    "GUARD_NAMES",
    "SHAPE_NAMES",
    "GuardResult",
    "KernelArgumentError",
    "UnsafeExpressionError",
    "check_guards",
    "check_tensors",
    "chunks_of",
    "guard_pair",
    "safe_eval",
    "validate_expression",
    "vocab_of",
    "width_of",
]


class KernelArgumentError(TypeError):
    """A tensor handed to a kernel does not match the variant's argument list."""


@dataclass(frozen=True, slots=True)
class GuardResult:
    ok: bool
    failed: list[tuple[str, str]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return self.ok


def guard_pair(guard) -> tuple[str, str]:
    """A guard as ``(expr, why)``: a manifest guard dict, or such a pair already."""
    return (guard["expr"], guard.get("why", "")) if isinstance(guard, Mapping) else tuple(guard)


def check_guards(guards: Iterable, *, min_seq_len: int, max_seq_len: int, batch: int) -> GuardResult:
    """Evaluate ``(expr, why)`` pairs (or manifest guard dicts) for one batch."""
    env = {"min_seq_len": min_seq_len, "max_seq_len": max_seq_len, "batch": batch}
    failed = []
    for guard in guards:
        expr, why = guard_pair(guard)
        if not safe_eval(expr, env):
            failed.append((expr, why))
    return GuardResult(not failed, failed)


def _bare_of(args: Sequence, tensors: Sequence, name: str) -> int | None:
    for a, t in zip(args, tensors):
        k = bare_axis(a.shape, name)
        if k is not None:
            return int(t.shape[k]) if t.dim() > k else 0
    return None


def vocab_of(args: Sequence, tensors: Sequence) -> int | None:
    """The vocabulary size ``V`` of a launch, read from its tensors; None when no shape names ``V``.

    The first argument whose shape has the bare ``V`` at axis ``k`` (``(B, V)``:
    ``k = 1``) gives it: ``tensors[i].shape[k]``.  A tensor with fewer axes gives
    0, which its shape check then refuses.  The launchers pass the same value.
    """
    return _bare_of(args, tensors, "V")


def chunks_of(args: Sequence, tensors: Sequence) -> int | None:
    """The chunks ``C`` of a launch (the blocks that share a block family's row), read from its tensors
    as ``vocab_of`` reads ``V`` (``(B, C, 2)``: axis 1); None when no shape names ``C``."""
    return _bare_of(args, tensors, "C")


def width_of(args: Sequence, tensors: Sequence) -> int | None:
    """The verify width ``W`` of a launch of a width-free variant (one whose key lacks ``W``), read from
    its tensors as ``vocab_of`` reads ``V`` (``(B, W)``: axis 1); None when no shape has a bare ``W``."""
    return _bare_of(args, tensors, "W")


def check_tensors(args: Sequence, tensors: Sequence, *, W: int | None, BT: int | None, NS: int | None, key: str) -> int:
    """Check ``tensors`` against the variant's ``args``; return the batch B.

    ``args`` are manifest argument records (``name``, ``dtype``, ``shape``).
    B is dim 0 of the first tensor; a shape naming ``V`` is checked with the
    ``V`` that ``vocab_of`` reads, one naming ``C`` with the ``C`` of
    ``chunks_of``; each must be at least 1.  ``W`` None (a width-free variant):
    the ``W`` that ``width_of`` reads, at least ``MIN_WIDTH``.  Any mismatch raises
    ``KernelArgumentError`` naming the argument; nothing is launched.
    """
    import torch

    if len(tensors) != len(args):
        names = ", ".join(a.name for a in args)
        raise KernelArgumentError(f"{key}: expected {len(args)} tensors ({names}), got {len(tensors)}")
    for a, t in zip(args, tensors):
        if not isinstance(t, torch.Tensor):
            raise KernelArgumentError(f"{key}: {a.name} must be a torch.Tensor, got {type(t).__name__}")
    first = tensors[0]
    if first.dim() == 0:
        raise KernelArgumentError(f"{key}: {args[0].name} must have a batch dimension, got a scalar")
    B = int(first.shape[0])
    device = first.device
    V, C = vocab_of(args, tensors), chunks_of(args, tensors)
    read = (("W", width_of(args, tensors)),) if W is None else ()  # the dimensions read from the tensors
    W = read[0][1] if read else W
    for a, t in zip(args, tensors):
        want_dtype = getattr(torch, a.dtype)
        if t.dtype != want_dtype:
            raise KernelArgumentError(
                f"{key}: {a.name} dtype expected {a.dtype}, got {str(t.dtype).removeprefix('torch.')}"
            )
        want_shape = eval_shape(a.shape, B=B, W=W or 0, BT=BT, NS=NS, V=V, C=C)
        if tuple(t.shape) != want_shape:
            with_read = "".join(f", {n}={d}" for n, d in (*read, ("V", V), ("C", C)) if d is not None)
            raise KernelArgumentError(
                f"{key}: {a.name} shape expected {want_shape} ({a.shape} with B={B}{with_read}), got {tuple(t.shape)}"
            )
        if t.device != device:
            raise KernelArgumentError(
                f"{key}: {a.name} device expected {device} (that of {args[0].name}), got {t.device}"
            )
        if not t.is_contiguous():
            raise KernelArgumentError(f"{key}: {a.name} must be contiguous, got strides {tuple(t.stride())}")
    if V is not None and V < 1:
        raise KernelArgumentError(f"{key}: the vocabulary V (read from the tensors) must be at least 1, got {V}")
    if C is not None and C < 1:
        raise KernelArgumentError(f"{key}: the chunks per row C (read from the tensors) must be at least 1, got {C}")
    if read and W is not None and W < MIN_WIDTH:
        raise KernelArgumentError(f"{key}: the width W (read from the tensors) must be at least {MIN_WIDTH}, got {W}")
    return B
