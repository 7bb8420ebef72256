"""The one evaluator for the small integer expressions that manifests and families carry.

Guards (``max_seq_len <= 8188``) and argument shapes (``(B * W,)``) are data:
they travel through ``manifest.json`` and must never run code.  Only integer
literals, a fixed set of names, ``+ - * //``, unary minus, comparisons,
``and/or/not`` and tuples parse::

    >>> safe_eval("(B * W, BT)", {"B": 2, "W": 4, "BT": 64}, SHAPE_NAMES)
    (8, 64)
    >>> safe_eval("__import__('os')", {}, GUARD_NAMES)
    Traceback (most recent call last):
    ...
    specgen.specializations.expr.UnsafeExpressionError: "__import__('os')": Call is not allowed
"""

from __future__ import annotations

import ast
import functools
import operator
from typing import Mapping

GUARD_NAMES = frozenset({"min_seq_len", "max_seq_len", "batch"})
# V: the vocabulary, C: the blocks (chunks) that share a block family's row; run-time dimensions like B
SHAPE_NAMES = frozenset({"B", "W", "BT", "NS", "V", "C"})

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}
_CMPOPS = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}


class UnsafeExpressionError(ValueError):
    """An expression uses syntax or names outside the allowed integer subset."""


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


@functools.lru_cache(maxsize=1024)
def _parse(text: str) -> ast.Expression:
    try:
        return ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise UnsafeExpressionError(f"{text!r}: {exc.msg}") from None


def safe_eval(text: str, env: Mapping[str, int], names: frozenset[str] = GUARD_NAMES):
    """Evaluate ``text`` over ``env``; only the integer subset above parses."""
    return _walk(_parse(text), env, names, text)


def validate_expression(text: str, names: frozenset[str] = GUARD_NAMES) -> None:
    """Raise ``UnsafeExpressionError`` unless ``text`` is in the allowed subset."""
    safe_eval(text, {n: 1 for n in names}, names)


@functools.lru_cache(maxsize=4096)  # launches repeat a few batch sizes; keep the check cheap
def eval_shape(
    shape: str,
    *,
    B: int,
    W: int,
    BT: int | None = None,
    NS: int | None = None,
    V: int | None = None,
    C: int | None = None,
) -> tuple[int, ...]:
    """A shape expression (``"(B * W,)"``, ``"(B, V)"``, ``"(B, C, 2)"``) as a tuple of ints."""
    env = {"B": B, "W": W, "BT": BT or 0, "NS": NS or 0, "V": V or 0, "C": C or 0}
    value = safe_eval(shape, env, SHAPE_NAMES)
    return tuple(int(v) for v in value) if isinstance(value, tuple) else (int(value),)


@functools.lru_cache(maxsize=1024)
def expression_names(text: str) -> frozenset[str]:
    """The names ``text`` reads (``"(B * W, V)"`` -> B, W, V), parsed, never matched as substrings."""
    return frozenset(n.id for n in ast.walk(_parse(text)) if isinstance(n, ast.Name))


@functools.lru_cache(maxsize=1024)
def bare_axis(shape: str, name: str) -> int | None:
    """The axis of a shape whose extent is the bare ``name`` (``"(B, C, 2)"``, ``"C"`` -> 1), or None.

    A tensor with such an axis tells the runtime that run-time dimension of a launch (``V``, ``C``)."""
    body = _parse(shape).body
    dims = body.elts if isinstance(body, ast.Tuple) else [body]
    return next((k for k, d in enumerate(dims) if isinstance(d, ast.Name) and d.id == name), None)


def vocab_axis(shape: str) -> int | None:
    """The axis of a shape whose extent is the bare name ``V`` (``"(W - 1, B, V)"`` -> 2), or None."""
    return bare_axis(shape, "V")
