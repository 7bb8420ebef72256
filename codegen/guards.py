"""A variant's run-time guards: its family's ``GuardRule`` records, specialized to its layout.

The rules are data on the family (``specializations.families``); here they
become sympy relations, the layout's constants are substituted and the
result is printed back as plain Python over ``min_seq_len``, ``max_seq_len``
and ``batch``.  A rule that always holds disappears; one that never holds
means the layout admits no sequence at all:

    >>> from specgen.specializations.variants import VariantSpec
    >>> [g.expr for g in guards(VariantSpec("spec_verify_metadata_update", 4, 64, 128))]
    ['min_seq_len >= 0', 'batch >= 1', 'max_seq_len <= 8188']

The runtime checks the printed guards with ``eval_guard`` (no sympy needed).
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass

import sympy as sp
from sympy.printing.str import StrPrinter

from ..specializations.expr import safe_eval
from ..specializations.families import FAMILIES
from ..specializations.variants import VariantSpec
from .indexing import BS, BT, NS, FloorDiv, W, atom, specialize

# Plain integers: a guard must not be presumed true by the symbols' assumptions.
min_seq_len, max_seq_len, batch = sp.symbols("min_seq_len max_seq_len batch", integer=True)
_SYMBOLS = {
    "min_seq_len": min_seq_len,
    "max_seq_len": max_seq_len,
    "batch": batch,
    "W": W,
    "BT": BT,
    "BS": BS,
    "NS": NS,
}
_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: FloorDiv,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: sp.Eq,
    ast.NotEq: sp.Ne,
}


@dataclass(frozen=True, slots=True)
class Guard:
    expr: str  # Python over min_seq_len, max_seq_len, batch; see eval_guard
    why: str


class GuardPrinter(StrPrinter):
    """Plain Python integer arithmetic, the subset ``eval_guard`` accepts."""

    def _print_FloorDiv(self, e):
        return f"({atom(self, e.args[0])} // {atom(self, e.args[1])})"

    def _print_Mod(self, e):
        raise ValueError("guards are written without %")


def relation(text: str):
    """A rule's expression as a sympy relation; ``//`` becomes ``FloorDiv``.

    The ground floor already checked the syntax (``GuardRule`` validates it),
    so only the integer subset reaches here.
    """

    def walk(node):
        if isinstance(node, ast.Constant):
            return sp.Integer(node.value)
        if isinstance(node, ast.Name):
            return _SYMBOLS[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        if isinstance(node, ast.BinOp):
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            return _OPS[type(node.ops[0])](walk(node.left), walk(node.comparators[0]))
        raise ValueError(f"guard rule {text!r}: {type(node).__name__} has no symbolic form")

    return walk(ast.parse(text, mode="eval").body)


def _isolate(rel):
    """``x + 4 <= 8192`` -> ``x <= 8188``: constants move to the right."""
    c, rest = (rel.lhs - rel.rhs).as_coeff_Add()
    return rel.func(rest, -c, evaluate=False)


def guards(spec: VariantSpec) -> list[Guard]:
    """Run-time conditions under which the variant ``spec`` equals its family's semantics."""
    out: dict[str, Guard] = {}
    for rule in FAMILIES[spec.family].guard_rules:
        rel = specialize(relation(rule.expr), spec.fixed_width, spec.block_table_width, spec.block_size)
        if rel == sp.false:
            raise ValueError(f"{spec.key}: no sequence satisfies {rule.why}")
        if rel == sp.true:
            continue
        if rel.free_symbols - {min_seq_len, max_seq_len, batch}:
            raise ValueError(f"{spec.key}: guard {rule.expr!r} names a parameter the family's key does not fix")
        g = Guard(GuardPrinter().doprint(_isolate(rel)), rule.why)
        out.setdefault(g.expr, g)
    return list(out.values())


def eval_guard(expr: str, **names: int) -> bool:
    """Evaluate a ``Guard.expr`` with plain ints, by the one evaluator of ``specializations.expr``.

    Only integer literals, the guard names, ``+ - * //``, comparisons and
    ``and/or/not`` parse; anything else raises ``ValueError``.

    >>> eval_guard("max_seq_len <= 8188 and batch >= 1", max_seq_len=10, batch=2)
    True
    """
    return bool(safe_eval(expr, names))
