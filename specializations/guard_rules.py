"""Guard rules: the conditions under which a family's variants equal its semantics.

A family lists its own (``Family.guards``) or takes what its arguments imply
(``Family.guard_rules``); ``codegen.guards`` substitutes a variant's layout
into them and the runtime checks them before every launch.
``specializations.families`` re-exports every name here.
"""

from __future__ import annotations

from dataclasses import dataclass

from .expr import GUARD_NAMES, validate_expression

# A guard rule may also name the layout's parameters; codegen substitutes them per variant.
GUARD_RULE_NAMES = GUARD_NAMES | {"W", "BT", "BS", "NS"}


@dataclass(frozen=True, slots=True)
class GuardRule:
    """A condition under which a family's variants equal its semantics, checked before every launch.

    ``expr`` is integer Python over ``min_seq_len``, ``max_seq_len``, ``batch``
    and the layout's ``W``, ``BT``, ``BS``; ``codegen.guards`` substitutes the
    layout, so ``max_seq_len + W <= BT * BS`` becomes ``max_seq_len <= 8188``
    for w4_bt64_bs128.
    """

    expr: str
    why: str

    def __post_init__(self):
        validate_expression(self.expr, GUARD_RULE_NAMES)


BASE_GUARDS = (
    GuardRule("min_seq_len >= 0", "S >= 0: positions and slots are computed for non-negative lengths"),
    GuardRule("batch >= 1", "B >= 1: a launch covers at least one sequence"),
)
# What a block_table argument implies: every position a variant writes, S .. S + W - 1, has an entry.
BLOCK_ENTRY = GuardRule("max_seq_len + W <= BT * BS", "S + W <= BT * BS: every verify position has a block-table entry")
