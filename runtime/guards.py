"""Run-time checks: guard expressions of a variant and the tensors of a launch.

A variant is specialized under assumptions (``max_seq_len <= 8188`` because
``S + W <= BT * BS``); the build writes them into the manifest as guard
expressions.  They are evaluated here by a small AST walker: integer literals,
a fixed set of names, ``+ - * //``, comparisons and ``and/or/not``.  Nothing
else parses, so a tampered manifest cannot run code::

    >>> check_guards([("max_seq_len <= 8188", "S + W <= BT * BS")],
    ...              min_seq_len=0, max_seq_len=9000, batch=4).failed
    [('max_seq_len <= 8188', 'S + W <= BT * BS')]

The same walker evaluates the manifest's shape expressions (``(B * W,)``), and
``check_tensors`` refuses a launch whose tensors do not match the variant.
"""

from __future__ import annotations

import ast
import functools
import operator
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

GUARD_NAMES = frozenset({"min_seq_len", "max_seq_len", "batch"})
SHAPE_NAMES = frozenset({"B", "W", "BT", "NS"})

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv}
_CMPOPS = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
           ast.GtE: operator.ge, ast.Eq: operator.eq, ast.NotEq: operator.ne}


class UnsafeExpressionError(ValueError):
    """An expression uses syntax or names outside the allowed integer subset."""


class KernelArgumentError(TypeError):
    """A tensor handed to a kernel does not match the variant's argument list."""


@dataclass(frozen=True, slots=True)
class GuardResult:
    ok: bool
    failed: list[tuple[str, str]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return self.ok


def _walk(node: ast.AST, env: Mapping[str, int], names: frozenset[str], text: str):
    if isinstance(node, ast.Expression):
        return _walk(node.body, env, names, text)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise UnsafeExpressionError(f"{text!r}: name {node.id!r} is not one of {sorted(names)}")
        if node.id not in env:
            raise UnsafeExpressionError(f"{text!r}: no value for {node.id!r}")
        return int(env[node.id])
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_walk(node.left, env, names, text), _walk(node.right, env, names, text))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_walk(node.operand, env, names, text)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _walk(node.operand, env, names, text)
    if isinstance(node, ast.BoolOp):
        values = [_walk(v, env, names, text) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare) and all(type(op) in _CMPOPS for op in node.ops):
        left = _walk(node.left, env, names, text)
        for op, comp in zip(node.ops, node.comparators):
            right = _walk(comp, env, names, text)
            if not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.Tuple):
        return tuple(_walk(e, env, names, text) for e in node.elts)
    raise UnsafeExpressionError(f"{text!r}: {type(node).__name__} is not allowed")


def safe_eval(text: str, env: Mapping[str, int], names: frozenset[str] = GUARD_NAMES):
    """Evaluate ``text`` over ``env``; only the integer subset above parses."""
    return _walk(_parse(text), env, names, text)


@functools.lru_cache(maxsize=1024)
def _parse(text: str) -> ast.Expression:
    try:
        return ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise UnsafeExpressionError(f"{text!r}: {exc.msg}") from None


def validate_expression(text: str, names: frozenset[str] = GUARD_NAMES) -> None:
    """Raise ``UnsafeExpressionError`` unless ``text`` is in the allowed subset."""
    safe_eval(text, {n: 1 for n in names}, names)


def check_guards(guards: Iterable, *, min_seq_len: int, max_seq_len: int, batch: int) -> GuardResult:
    """Evaluate ``(expr, why)`` pairs (or manifest guard dicts) for one batch."""
    env = {"min_seq_len": min_seq_len, "max_seq_len": max_seq_len, "batch": batch}
    failed = []
    for guard in guards:
        expr, why = (guard["expr"], guard.get("why", "")) if isinstance(guard, Mapping) else guard
        if not safe_eval(expr, env):
            failed.append((expr, why))
    return GuardResult(not failed, failed)


@functools.lru_cache(maxsize=4096)  # launches repeat a few batch sizes; keep the check cheap
def expected_shape(shape: str, *, B: int, W: int, BT: int | None, NS: int | None) -> tuple[int, ...]:
    env = {"B": B, "W": W, "BT": BT or 0, "NS": NS or 0}
    value = safe_eval(shape, env, SHAPE_NAMES)
    return value if isinstance(value, tuple) else (value,)


def check_tensors(args: Sequence, tensors: Sequence, *, W: int, BT: int | None, NS: int | None,
                  key: str) -> int:
    """Check ``tensors`` against the variant's ``args``; return the batch B.

    ``args`` are manifest argument records (``name``, ``dtype``, ``shape``).
    B is dim 0 of the first tensor.  Any mismatch raises ``KernelArgumentError``
    naming the argument; nothing is launched.
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
    for a, t in zip(args, tensors):
        want_dtype = getattr(torch, a.dtype)
        if t.dtype != want_dtype:
            raise KernelArgumentError(f"{key}: {a.name} dtype expected {a.dtype}, got {str(t.dtype).removeprefix('torch.')}")
        want_shape = expected_shape(a.shape, B=B, W=W, BT=BT, NS=NS)
        if tuple(t.shape) != want_shape:
            raise KernelArgumentError(f"{key}: {a.name} shape expected {want_shape} ({a.shape} with B={B}), got {tuple(t.shape)}")
        if t.device != device:
            raise KernelArgumentError(f"{key}: {a.name} device expected {device} (that of {args[0].name}), got {t.device}")
        if not t.is_contiguous():
            raise KernelArgumentError(f"{key}: {a.name} must be contiguous, got strides {tuple(t.stride())}")
    return B
