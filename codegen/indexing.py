"""Index algebra of the kernel families, as sympy expressions.

Every index a template prints (rows, slots, block counts, tiling) is built
here, simplified under the variant's specialization and printed by
``TileLangPrinter``.  Integer semantics are explicit: ``FloorDiv`` and
``Mod`` floor like Python's ``//`` and ``%``; sympy's ``/`` never appears.

    >>> p = sp.Symbol("p", integer=True, nonnegative=True)
    >>> TileLangPrinter().doprint(FloorDiv(FloorDiv(p, 16), 8))
    '(p >> 7)'

The printed guards of a variant (``codegen.guards``) use the same
``FloorDiv`` and ``specialize``.
"""

from __future__ import annotations

import sympy as sp
from sympy.core.relational import Relational
from sympy.printing.str import StrPrinter


def _int(name: str) -> sp.Symbol:
    return sp.Symbol(name, integer=True, nonnegative=True)


INT32_MAX = 2**31 - 1

# Kernel-side names: the templates bind these Python names before use.  A
# sequence length is any int32 (the kernels are total), so S and Sq carry no
# sign; the templates saturate them at ``seq_cap(W)`` so that S + W fits int32.
# The accepted count ``a`` is clamped into 0..W-1 where it is bound.  A
# per-row launch binds the row ``r`` and derives ``b = r // W``, ``j = r % W``.
b, j, a, r = (_int(n) for n in ("b", "j", "a", "r"))
S, Sq = sp.Symbol("S", integer=True), sp.Symbol("Sq", integer=True)
W, BT, BS, NS, B = (_int(n) for n in ("W", "BT", "BS", "NS", "B"))
block_table = sp.IndexedBase("block_table")


def seq_cap(width: int) -> int:
    """Largest sequence length a kernel reads: S is saturated there, so S + W never exceeds int32."""
    return INT32_MAX - width


def _pos_int(e) -> bool:
    return isinstance(e, sp.Integer) and e > 0


class FloorDiv(sp.Function):
    """floor(x / y) for integers; folds constants, x // 1 and nested divisions."""

    is_integer = True
    nargs = 2

    @classmethod
    def eval(cls, x, y):
        if y == 0:
            raise ZeroDivisionError("FloorDiv by zero")
        if isinstance(x, sp.Integer) and isinstance(y, sp.Integer):
            return sp.Integer(int(x) // int(y))
        if y == 1:
            return x
        if x == 0:
            return sp.Integer(0)
        if not _pos_int(y):
            return None
        # floor((k*y*q + r) / y) == k*q + floor(r / y) for integer q: pull out
        # the terms divisible by y so nested forms below can match.
        whole, rest = _split_multiple(x, int(y))
        if whole != 0:
            return whole + cls(rest, y)
        # y - 1 - (u mod y) lies in [0, y): its quotient is 0 (the slot's entry bound).
        if _mod_complement(rest, int(y)):
            return sp.Integer(0)
        # floor((floor(u / d) + r) / y) == floor((u + d*r) / (d*y)), r integer.
        inner = _single_floordiv(x)
        if inner is not None:
            fd, r = inner
            u, d = fd.args
            if _pos_int(d):
                return cls(u + d * r, d * y)
        return None

    def _eval_is_nonnegative(self):
        x, y = self.args
        if x.is_nonnegative and y.is_positive:
            return True
        return None


class Mod(sp.Function):
    """x mod y with the sign of y (Python's ``%``); folds constants and nests."""

    is_integer = True
    nargs = 2

    @classmethod
    def eval(cls, x, y):
        if y == 0:
            raise ZeroDivisionError("Mod by zero")
        if isinstance(x, sp.Integer) and isinstance(y, sp.Integer):
            return sp.Integer(int(x) % int(y))
        if y == 1 or x == 0:
            return sp.Integer(0)
        if not _pos_int(y):
            return None
        whole, rest = _split_multiple(x, int(y))
        if whole != 0:
            return cls(rest, y)
        if isinstance(x, Mod) and _pos_int(x.args[1]) and int(x.args[1]) % int(y) == 0:
            return cls(x.args[0], y)
        return None

    def _eval_is_nonnegative(self):
        return True if self.args[1].is_positive else None


def _split_multiple(x, y: int):
    """Split x into (terms with integer coefficients divisible by y) / y and the rest."""
    whole, rest = sp.Integer(0), sp.Integer(0)
    for term in sp.Add.make_args(x):
        coeff, tail = term.as_coeff_Mul()
        if isinstance(term, sp.Integer) and (int(term) >= y or int(term) % y == 0):
            # c == y * (c // y) + c % y; a negative remainder stays put so the
            # operand keeps its sign (and its shift/mask spelling).
            whole += int(term) // y
            rest += int(term) % y
        elif isinstance(coeff, sp.Integer) and int(coeff) % y == 0 and tail.is_integer:
            whole += (int(coeff) // y) * tail
        else:
            rest += term
    return whole, rest


def _mod_complement(x, y: int) -> bool:
    """x == y - 1 - (u mod y) for some u."""
    terms = sp.Add.make_args(x)
    if len(terms) != 2 or sp.Integer(y - 1) not in terms:
        return False
    other = terms[0] if terms[1] == y - 1 else terms[1]
    coeff, tail = other.as_coeff_Mul()
    return coeff == -1 and isinstance(tail, Mod) and tail.args[1] == y


def _single_floordiv(x):
    """(fd, r) when x == fd + r with exactly one FloorDiv term and r integer."""
    terms = sp.Add.make_args(x)
    fds = [t for t in terms if isinstance(t, FloorDiv)]
    if len(fds) != 1:
        return None
    r = sp.Add(*(t for t in terms if t is not fds[0]))
    return (fds[0], r) if r.is_integer else None


def ceil_div(x, y):
    """ceil(x / y) for integer x and positive integer y."""
    return FloorDiv(x + y - 1, y)


def row(seq, jj, width=W):
    """Row of the verification layout: r = b * W + j."""
    return seq * width + jj


def entry_limit(offset, bs=BS):
    """Largest block-table entry e with e * BS + offset <= 2**31 - 1 (0 <= offset < BS).

    When BS divides 2**31 the bound is the same for every offset: a constant.
    """
    if isinstance(bs, int) and 2**31 % bs == 0:
        return sp.Integer(2**31 // bs - 1)
    return FloorDiv(INT32_MAX - offset, bs)


def slot_entry(seq, p, bt=BT, bs=BS, when=sp.true):
    """The block-table entry of position p, or -1 when p is outside [0, BT * BS) (or ``when`` fails).

    The table is read only for a position inside the row: ``T.if_then_else``
    evaluates one branch, so a template binds this once per position
    (``e: T.int32 = ...``) and builds the slot from it with ``slot_from_entry``.
    """
    return sp.Piecewise((block_table[seq, FloorDiv(p, bs)], sp.And(when, p >= 0, p < bt * bs)), (-1, True))


def slot_from_entry(entry, p, bs=BS):
    """e * BS + p % BS for an entry e >= 0 whose slot fits int32; -1 (no write) otherwise."""
    offset = Mod(p, bs)
    usable = sp.And(entry >= 0, entry <= entry_limit(offset, bs))
    return sp.Piecewise((entry * bs + offset, usable), (-1, True))


def slot(seq, p, bt=BT, bs=BS):
    """``docs/kernels.md`` slot(b, p) as one expression; -1 (no write) unless 0 <= p < BT * BS and
    the entry is non-negative with a slot that fits int32.  Templates use the two steps above."""
    inner = slot_from_entry(block_table[seq, FloorDiv(p, bs)], p, bs)
    return sp.Piecewise((inner, sp.And(p >= 0, p < bt * bs)), (-1, True))


def row_kv_len(s=S, jj=j):
    """Causal KV length of verify row j: S + j + 1 (the kernels store it clamped at 0)."""
    return s + jj + 1


def num_blocks(s=S, jj=j, bs=BS):
    """ceil(kv / BS) for kv = max(S + j + 1, 0), spelled max((kv - 1) // BS + 1, 0) so that
    kv + BS - 1 never overflows (and an empty row, kv <= 0, has 0 blocks)."""
    return sp.Max(FloorDiv(row_kv_len(s, jj) - 1, bs) + 1, 0)


def sequence_blocks(s, width: int, bs=BS):
    """Blocks of all W rows of one sequence: sum_j ceil(max(S + j + 1, 0) / BS).

    With a known block size of at least W the sum has a closed form: writing
    S = q * BS + r, row j needs q + 1 blocks plus one more when r + j >= BS,
    so the total is W * (S // BS + 1) + max(0, S % BS + W - BS).  That holds
    for every S >= -BS (a row of -BS < kv <= 0 keys has ceil(kv / BS) = 0
    blocks); below -W every row is empty, so S is raised to -W first.
    Otherwise the W terms are unrolled.

    >>> from sympy import Symbol
    >>> s = Symbol("s", integer=True)
    >>> [int(sequence_blocks(s, 4, 16).subs(s, v)) for v in (-99, -3, 0, 12, 13, 15, 16)]
    [0, 1, 4, 4, 5, 7, 8]
    """
    if isinstance(bs, int) and width <= bs:
        low = sp.Max(s, -width)
        return width * (FloorDiv(low, bs) + 1) + sp.Max(0, Mod(low, bs) + width - bs)
    return sp.Add(*(num_blocks(s, jj, bs) for jj in range(width)))


def last_block_len(s=S, jj=j, bs=BS):
    """kv - (ceil(kv / BS) - 1) * BS, which equals (kv - 1) % BS + 1 for kv >= 1; 0 for an empty row."""
    kv = row_kv_len(s, jj)
    return sp.Piecewise((Mod(kv - 1, bs) + 1, kv >= 1), (0, True))


def kv_split_len(max_kv, bs=BS, ns=NS):
    """ceil(ceil(max / BS) / NS) * BS = ceil(max / (BS * NS)) * BS, as (max - 1) // (BS * NS) + 1 for max >= 1."""
    return sp.Piecewise(((FloorDiv(max_kv - 1, bs * ns) + 1) * bs, max_kv >= 1), (0, True))


def specialize(expr, width=None, block_table_width=None, block_size=None, num_splits=None):
    """Substitute the variant's constants; the FloorDiv/Mod rules then fold."""
    subs = {k: v for k, v in ((W, width), (BT, block_table_width), (BS, block_size), (NS, num_splits)) if v is not None}
    out = sp.sympify(expr).subs(subs)
    return out.replace(lambda e: isinstance(e, Relational), _integral_relation)


def _integral_relation(rel):
    """``S/128 + j/128 < 64`` -> ``S + j < 8192``: sympy's relational
    canonicalisation divides by common factors, which has no integer meaning."""
    num, den = sp.fraction(sp.together(rel.lhs - rel.rhs))
    if den == 1 or not (den.is_number and den > 0):
        return rel
    c, rest = num.as_coeff_Add()
    if rest == 0:
        return rel.func(num, 0)
    return rel.func(rest, -c, evaluate=False)


def atom(printer, e) -> str:
    """``e`` printed as an operand: parenthesised unless it is a name, a number, an access or a call."""
    text = printer._print(e)
    return text if isinstance(e, (sp.Symbol, sp.Integer, sp.Indexed)) or e.is_Function else f"({text})"


def _power_of_two(y) -> int | None:
    if _pos_int(y) and int(y) & (int(y) - 1) == 0:
        return int(y).bit_length() - 1
    return None


class TileLangPrinter(StrPrinter):
    """Prints index expressions as TileLang Python (TVM PrimExpr) code.

    Python's ``and``/``or``/``max`` and a conditional expression cannot act on
    PrimExprs, and ``//``/``%`` are spelled out so a reader never wonders
    whether they truncate (C) or floor (Python, TVM).  A power-of-two divisor
    of a non-negative operand becomes a shift or a mask.
    """

    def _print_FloorDiv(self, e):
        x, y = e.args
        k = _power_of_two(y)
        if k is not None and x.is_nonnegative:
            return f"({atom(self, x)} >> {k})"
        return f"T.floordiv({self._print(x)}, {self._print(y)})"

    def _print_Mod(self, e):
        x, y = e.args
        k = _power_of_two(y)
        if k is not None and x.is_nonnegative:
            return f"({atom(self, x)} & {int(y) - 1})"
        return f"T.floormod({self._print(x)}, {self._print(y)})"

    def _print_Max(self, e):
        return self._fold("T.max", e.args)

    def _print_Min(self, e):
        return self._fold("T.min", e.args)

    def _fold(self, fn, args):
        out = self._print(args[0])
        for arg in args[1:]:
            out = f"{fn}({out}, {self._print(arg)})"
        return out

    def _print_Piecewise(self, e):
        *pairs, (last, cond) = e.args
        if cond != sp.true:
            raise ValueError("Piecewise without an otherwise branch has no kernel meaning")
        out = self._print(last)
        for value, c in reversed(pairs):
            out = f"T.if_then_else({self._print(c)}, {self._print(value)}, {out})"
        return out

    def _print_And(self, e):
        return self._fold("T.And", e.args)

    def _print_Or(self, e):
        return self._fold("T.Or", e.args)

    def _print_Not(self, e):
        return f"T.Not({self._print(e.args[0])})"

    def _print_Relational(self, e):
        op = {"==": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}[e.rel_op]
        return f"({self._print(e.lhs)} {op} {self._print(e.rhs)})"

    def _print_BooleanTrue(self, e):
        return "True"

    def _print_BooleanFalse(self, e):
        return "False"

    def _print_Indexed(self, e):
        idx = ", ".join(self._print(i) for i in e.indices)
        return f"{e.base}[{idx}]"

    def _print_Rational(self, e):
        raise ValueError(f"non-integer index expression {e}: use FloorDiv")

    def _print_Pow(self, e):
        base, exp = e.args
        if isinstance(exp, sp.Integer) and exp > 0:
            return "(" + " * ".join([self._print(base)] * int(exp)) + ")"
        raise ValueError(f"no kernel spelling for {e}")


def tl(expr) -> str:
    """TileLang Python text of an index expression."""
    return TileLangPrinter().doprint(expr)
