"""Index algebra: sympy expressions, their TileLang spelling and the guards."""

from __future__ import annotations

import doctest

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from specgen.codegen import guards as guards_module
from specgen.codegen import indexing as ix
from specgen.codegen.guards import Guard, eval_guard, guards
from specgen.codegen.indexing import FloorDiv, Mod, TileLangPrinter, ceil_div, specialize, tl
from specgen.specializations.families import FAMILIES
from specgen.specializations.variants import Layout, VariantSpec

x, y = sp.symbols("x y", integer=True)
n = sp.Symbol("n", integer=True, nonnegative=True)


class _IntT:
    """The ``T`` namespace of printed expressions, acting on Python ints."""

    floordiv = staticmethod(lambda p, q: p // q)
    floormod = staticmethod(lambda p, q: p % q)
    max, min = staticmethod(max), staticmethod(min)
    if_then_else = staticmethod(lambda c, p, q: p if c else q)
    And = staticmethod(lambda p, q: p and q)
    Or = staticmethod(lambda p, q: p or q)
    Not = staticmethod(lambda p: not p)


def run_printed(expr, **env):
    return eval(tl(expr), {"T": _IntT, "__builtins__": {}}, env)  # noqa: S307 - our own printer


ints = st.integers(-(10**6), 10**6)
divisors = st.integers(1, 300)


@settings(deadline=None)
@given(ints, divisors)
def test_floordiv_and_mod_fold_like_python(p, q):
    assert FloorDiv(p, q) == p // q and Mod(p, q) == p % q
    assert FloorDiv(p, -q) == p // -q and Mod(p, -q) == p % -q


@settings(deadline=None)
@given(ints, divisors, divisors, st.integers(-50, 50))
def test_symbolic_rules_equal_integer_math(p, d1, d2, c):
    cases = [
        FloorDiv(FloorDiv(x, d1), d2),
        FloorDiv(FloorDiv(x, d1) + c * y, d2),
        FloorDiv(d1 * d2 * y + x + c, d1),
        Mod(x + d1 * c * y + c, d1),
        Mod(Mod(x, d1 * d2), d1),
        ceil_div(x, d1),
        FloorDiv(x, 1) + Mod(x, 1),
    ]
    want = [
        p // d1 // d2,
        (p // d1 + c * 3) // d2,
        (d1 * d2 * 3 + p + c) // d1,
        (p + d1 * c * 3 + c) % d1,
        p % (d1 * d2) % d1,
        -(-p // d1),
        p,
    ]
    for expr, w in zip(cases, want):
        assert int(expr.subs({x: p, y: 3})) == w, expr


def test_simplification_rules():
    assert FloorDiv(x, 1) == x and Mod(x, 1) == 0 and FloorDiv(0, x) == 0
    assert FloorDiv(FloorDiv(x, 16), 8) == FloorDiv(x, 128)
    assert FloorDiv(4 * x + 8, 4) == x + 2
    split = sp.Piecewise((128 * FloorDiv(n - 1, 1024) + 128, n >= 1), (0, True))
    assert specialize(ix.kv_split_len(n), block_size=128, num_splits=8) == split
    # the slot's overflow bound: y - 1 - (u mod y) lies in [0, y)
    assert FloorDiv(127 - Mod(x, 128), 128) == 0 and FloorDiv(126 - Mod(x, 128), 128) != 0
    assert ix.entry_limit(Mod(x, 128), 128) == 2**24 - 1


INT32 = st.integers(-(2**31), 2**31 - 1)
EDGES = st.sampled_from([-(2**31), -17, -16, -5, -1, 0, 1, 15, 16, 2**31 - 17, 2**31 - 6, 2**31 - 1])


def _blocks(kv, bs):
    return -(-max(kv, 0) // bs)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(INT32, EDGES, st.integers(-40, 5000)),
    st.integers(0, 15),
    st.sampled_from([1, 2, 5, 16, 128, 100, 7]),
    st.integers(1, 16),
    st.one_of(st.integers(0, 5000), st.just(2**31 - 1)),
)
def test_closed_forms_match_integer_math(raw, jj, bs, ns, longest):
    """Over the whole int32 range, with S saturated at 2**31 - 1 - W as the templates read it."""
    width = jj + 1
    s = min(raw, ix.seq_cap(width))
    kv = max(s + jj + 1, 0)
    blocks = _blocks(kv, bs)
    env = {"S": s, "j": jj}
    for expr, want in [
        (sp.Max(ix.row_kv_len(), 0), kv),
        (ix.num_blocks(), blocks),
        (ix.last_block_len(), kv - (blocks - 1) * bs if kv else 0),
    ]:
        spec = specialize(expr, block_size=bs)
        assert int(spec.subs({ix.S: s, ix.j: jj})) == want
        assert run_printed(spec, **env) == want
    split = specialize(ix.kv_split_len(ix.Sq), block_size=bs, num_splits=ns)
    assert run_printed(split, Sq=longest) == -(-_blocks(longest, bs) // ns) * bs
    seq = ix.sequence_blocks(ix.S, width, bs)  # the closed form when W <= BS, else unrolled
    assert run_printed(seq, S=s) == sum(_blocks(s + k + 1, bs) for k in range(width))


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(INT32, st.integers(-3, 3000)),
    st.sampled_from([(8, 16), (64, 128), (3, 100), (4, 7), (3, 5)]),
    st.one_of(INT32, st.integers(-2, 10**5), st.sampled_from([2**24 - 1, 2**24, 429496729, 429496730])),
)
def test_slot_printed_equals_python(p, layout, entry):
    bt, bs = layout

    class Table:  # the int T.if_then_else evaluates both branches: any row may be read
        def __getitem__(self, idx):
            return entry + 7 * idx[1]

    e = entry + 7 * (p // bs)
    value = e * bs + p % bs
    want = value if 0 <= p < bt * bs and e >= 0 and value <= 2**31 - 1 else -1
    ns = {"T": _IntT, "block_table": Table(), "__builtins__": {}}
    general = specialize(ix.slot(ix.b, x), block_table_width=bt, block_size=bs)  # sign unknown
    assert eval(tl(general), ns, {"b": 0, "x": p}) == want  # noqa: S307
    split = specialize(ix.slot(ix.b, ix.S + ix.j), block_table_width=bt, block_size=bs)
    assert eval(tl(split), ns, {"b": 0, "S": p // 2, "j": p - p // 2}) == want  # noqa: S307
    # the templates' two steps: bind the entry (-1 outside the table), then build the slot from it
    e_sym = sp.Symbol("e", integer=True)
    first = tl(specialize(ix.slot_entry(ix.b, x), block_table_width=bt, block_size=bs))
    then = tl(specialize(ix.slot_from_entry(e_sym, x), block_size=bs))
    bound = eval(first, ns, {"b": 0, "x": p})  # noqa: S307
    assert eval(then, ns, {"e": bound, "x": p}) == want  # noqa: S307


def test_power_of_two_prints_shift_and_mask():
    p = sp.Symbol("p", integer=True, nonnegative=True)
    text = TileLangPrinter().doprint(specialize(ix.slot(ix.b, p + ix.j), 4, 64, 128))
    assert "((j + p) >> 7)" in text and "((j + p) & 127)" in text and "//" not in text
    # S has no sign (a kernel is total over int32): its slot tests the lower bound and keeps floor semantics
    text = tl(specialize(ix.slot(ix.b, ix.S + ix.j), 4, 64, 128))
    assert "(S + j >= 0)" in text and "T.floordiv(S + j, 128)" in text and "<= 16777215" in text
    # an operand of unknown sign keeps floor semantics explicitly
    assert tl(FloorDiv(x, 128)) == "T.floordiv(x, 128)" and tl(Mod(x, 128)) == "T.floormod(x, 128)"
    assert tl(sp.Max(n - 1, 0)).startswith("T.max(") and tl(sp.Min(n, 3)).startswith("T.min(")


def test_metadata_guard_matches_the_documented_example():
    gs = guards(VariantSpec("spec_verify_metadata_update", 4, 64, 128))
    assert Guard("max_seq_len <= 8188", "S + W <= BT * BS: every verify position has a block-table entry") in gs
    assert {"min_seq_len >= 0", "batch >= 1"} <= {g.expr for g in gs}


@pytest.mark.parametrize("family", sorted(FAMILIES))
@settings(max_examples=40, deadline=None)
@given(
    w=st.integers(2, 16),
    bt=st.integers(1, 64),
    bs=st.sampled_from([16, 128, 100]),
    lo=st.integers(-5, 9000),
    hi=st.integers(0, 9000),
    batch=st.integers(-1, 300),
)
def test_guards_hold_exactly_when_the_layout_fits(family, w, bt, bs, lo, hi, batch):
    try:
        gs = guards(VariantSpec.of(family, Layout(w, bt, bs)))
    except ValueError:
        assert bt * bs < w + 1  # no sequence fits the table at all
        return
    ok = all(eval_guard(g.expr, min_seq_len=lo, max_seq_len=hi, batch=batch) for g in gs)
    need = {
        "spec_verify_metadata_update": hi + w <= bt * bs,
        "context_kv_update": hi + w <= bt * bs,
        "prepare_next_draft": hi + w + 1 <= bt * bs,
        "spec_batch_row_remap": hi + 1 <= bt * bs,
    }
    # a composite needs what each of its members needs
    fits = all(need.get(f, True) for f in (FAMILIES[family].members or (family,)))
    assert ok == (lo >= 0 and batch >= 1 and fits)


@pytest.mark.parametrize(
    "expr",
    [
        "__import__('os')",
        "max_seq_len ** 2 < 3",
        "x < 1",
        "min_seq_len < 1.5",
        "f(batch)",
        "batch.real > 0",
        "[batch] == [3]",
    ],
)
def test_eval_guard_rejects_anything_else(expr):
    with pytest.raises(ValueError):
        eval_guard(expr, min_seq_len=1, max_seq_len=2, batch=3)


def test_eval_guard_arithmetic():
    assert eval_guard("4*batch*(((max_seq_len + 3) // 128) + 1) <= 2147483647", max_seq_len=8000, batch=256)
    assert not eval_guard("max_seq_len <= 8188 and batch >= 1", max_seq_len=8189, batch=1)
    assert eval_guard("-1 < min_seq_len - 1 == 0", min_seq_len=1)
    assert eval_guard("max_seq_len < 1 or batch > 2", max_seq_len=2, batch=3)
    assert not eval_guard("not batch >= 1", batch=3)


def test_doctests():
    assert doctest.testmod(ix).failed == 0
    assert doctest.testmod(guards_module).failed == 0
