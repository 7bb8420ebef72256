"""Families (guard rules, registration) and the one safe expression evaluator."""

from __future__ import annotations

import subprocess
import sys

import pytest

from specgen.specializations import (
    BASE_GUARDS,
    BLOCK_ENTRY,
    COMPOSITES,
    FAMILIES,
    ArgSpec,
    Family,
    GuardRule,
    register,
    shape_of,
    unregister,
)
from specgen.specializations.expr import (
    GUARD_NAMES,
    SHAPE_NAMES,
    UnsafeExpressionError,
    eval_shape,
    safe_eval,
    validate_expression,
)


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os')",
        "batch.real",
        "f(batch)",
        "batch ** 2",
        "batch / 2",
        "1.5 < batch",
        "[batch]",
        "batch[0]",
        "lambda: 1",
        "(yield)",
        "batch if batch else 0",
        "'a' < 'b'",
        "True",
        "x < 1",
        "batch << 2",
        "batch; batch",
        "import os",
    ],
)
def test_unsafe_syntax_is_rejected(text):
    with pytest.raises(UnsafeExpressionError):
        safe_eval(text, {"batch": 1, "min_seq_len": 0, "max_seq_len": 1})


def test_the_integer_subset_evaluates():
    env = {"batch": 3, "min_seq_len": 2, "max_seq_len": 9}
    assert safe_eval("batch * (max_seq_len + 1) // 4 - -1", env) == 8
    assert safe_eval("0 <= min_seq_len <= max_seq_len and not batch < 1 or batch == 0", env) is True
    assert eval_shape("(B * W + 1, BT)", B=2, W=4, BT=64) == (9, 64) and eval_shape("B", B=5, W=2) == (5,)
    with pytest.raises(UnsafeExpressionError, match="no value"):
        safe_eval("batch", {})
    with pytest.raises(UnsafeExpressionError, match="not one of"):
        validate_expression("W + 1", GUARD_NAMES)
    validate_expression("(B * W,)", SHAPE_NAMES)


def test_every_shape_evaluates():
    for fam in FAMILIES.values():
        for arg in fam.args:  # V, C: a block family's run-time dimensions (the vocabulary, the chunks per row)
            assert all(d > 0 for d in shape_of(arg, 3, 4, 64, V=37, C=2)), (fam.name, arg.name)


def test_guard_rules_follow_the_definition():
    assert FAMILIES["greedy_prefix_verify"].guard_rules == BASE_GUARDS
    assert FAMILIES["spec_verify_metadata_update"].guard_rules == BASE_GUARDS + (BLOCK_ENTRY,)
    assert FAMILIES["prepare_next_draft"].guard_rules[-1].expr == "max_seq_len + W + 1 <= BT * BS"
    head = FAMILIES["spec_verify_head_update"].guard_rules
    members = [r for m in COMPOSITES["spec_verify_head_update"] for r in FAMILIES[m].guard_rules]
    assert [r.expr for r in head] == list(dict.fromkeys(r.expr for r in members))
    with pytest.raises(UnsafeExpressionError):
        GuardRule("__import__('os')", "never")
    with pytest.raises(UnsafeExpressionError):
        GuardRule("seq_lens < 3", "a tensor is not a guard name")


def test_register_and_unregister():
    paged = Family(
        "toy_paged",
        ("W", "BT", "BS"),
        (ArgSpec("block_table", "int32", "(B, BT)"), ArgSpec("out", "int32", "(B,)", output=True)),
    )
    try:
        assert register(paged) is paged and FAMILIES["toy_paged"].guard_rules[-1] == BLOCK_ENTRY
        with pytest.raises(ValueError, match="already registered"):
            register(paged)
        both = register(Family("toy_both", (), (), members=("toy_paged", "greedy_prefix_verify")))
        assert both.key_params == ("W", "BT", "BS") and COMPOSITES["toy_both"] == both.members
        assert [a.name for a in both.args][-3:] == ["out", "accepted", "next_tokens"]
    finally:
        unregister("toy_both")
        unregister("toy_paged")
    assert "toy_paged" not in FAMILIES and "toy_both" not in COMPOSITES


def test_importing_the_ground_floor_loads_no_heavy_package():
    code = (
        "import sys, specgen.specializations; "
        "print(sorted(m for m in ('torch', 'sympy', 'jinja2', 'tilelang', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
