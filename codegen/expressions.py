"""What a family's template prints: index expressions of one variant, built with sympy.

Every template sees the common context (``helpers``): ``expr(e)``, which
specializes an index expression to the variant and prints it as TileLang,
the index algebra as ``ix`` (symbols ``ix.b``, ``ix.j``, ``ix.S``, ``ix.W``
..., ``ix.row``, ``ix.slot``, ``ix.FloorDiv`` ...) and sympy as ``sp``.  A
family needs no Python here: its template can write

    positions[{{ expr(ix.row(ix.b, ix.j)) }}] = {{ expr(ix.S + ix.j) }}

A family whose expressions are easier to build in Python registers a builder
with ``@expressions("family")``; its names join the template's context.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import sympy as sp

from ..specializations import guard_check as gc
from ..specializations.families import DEFAULT_NUM_SPLITS
from ..specializations.variants import VariantSpec
from ..specializations.vocab_sample import LOGIT_TILE, VOCAB_FAMILIES
from . import indexing as ix
from .indexing import S, Sq, a, b, j, slot_entry, slot_from_entry, specialize, tl


@dataclass(frozen=True, slots=True)
class Instance:
    """One variant on one target, as its template sees it."""

    spec: VariantSpec
    target: str
    threads: int = 128

    @property
    def num_splits(self) -> int:
        return self.spec.num_splits or DEFAULT_NUM_SPLITS

    def specialize(self, expr) -> sp.Expr:
        s = self.spec  # a width-free variant keeps W: a run-time dimension like B
        return specialize(expr, s.fixed_width, s.block_table_width, s.block_size, self.num_splits)

    def expr(self, expr) -> str:
        """``expr`` with the variant's constants substituted, as TileLang text."""
        return tl(self.specialize(expr))


Builder = Callable[[Instance], dict]
EXPRESSIONS: dict[str, Builder] = {}


def expressions(family: str) -> Callable[[Builder], Builder]:
    """Register the expression builder of ``family`` (a decorator)."""

    def register(fn: Builder) -> Builder:
        EXPRESSIONS[family] = fn
        return fn

    return register


def helpers(v: Instance) -> dict:
    """The names every template may use besides the launch frame."""
    return {"expr": v.expr, "ix": ix, "sp": sp, "tensor": sp.IndexedBase}


def context(v: Instance) -> dict:
    """The common helpers plus the family's own expressions, when it registered a builder."""
    build = EXPRESSIONS.get(v.spec.family)
    return helpers(v) | (build(v) if build else {})


def _idx(name):
    return sp.IndexedBase(name)


def _local(name):
    """A per-thread int32 the template binds (``name: T.int32 = ...``)."""
    return sp.Symbol(name, integer=True)


def _per_row(v: Instance) -> dict:
    """What every per-row template prints besides its own values: its row ``r``, the row count
    ``B * W`` and the test for the batch's last row (which closes the ``B + 1`` lists)."""
    rows = ix.row(ix.B, 0)
    return {"row": v.expr(ix.r), "total_rows": v.expr(rows), "last_row": v.expr(sp.Eq(ix.r, rows - 1))}


@expressions("spec_verify_token_update")
def _token_update(v: Instance) -> dict:
    # Row j > 0 holds draft column j - 1. Every row reads column max(j - 1, 0), inside the W - 1 >= 1
    # columns, so that the read needs no branch; row 0 then takes last_tokens instead.
    draft = v.expr(_idx("draft_tokens")[b, sp.Max(j - 1, 0)])
    # an int64 token outside int32 is no token: -1, never its low 32 bits
    wide = (
        f"T.if_then_else(T.And({draft} >= {-ix.INT32_MAX - 1}, {draft} <= {ix.INT32_MAX}), "
        f'T.Cast("int32", {draft}), -1)'
    )
    return _per_row(v) | {"draft_value": draft if v.spec.draft_dtype == "int32" else wide}


@expressions("spec_verify_metadata_update")
def _metadata(v: Instance) -> dict:
    return _per_row(v) | {
        "position": v.expr(sp.Max(S + j, 0)),
        "entry": v.expr(slot_entry(b, S + j)),
        "slot": v.expr(slot_from_entry(_local("slot_entry"), S + j)),
        "kv_len": v.expr(sp.Max(S + ix.W, 0)),
        "start": v.expr(ix.row(b, 0)),
    }


@expressions("spec_verify_attention_tiling_update")
def _tiling(v: Instance) -> dict:
    wide = sp.Symbol("wide", integer=True, nonnegative=True)  # the longest row, int64
    jq = sp.Symbol("jq", integer=True, nonnegative=True)  # a row of an earlier stretch of a sequence
    warp0 = sp.Symbol("warp0", integer=True, nonnegative=True)  # the first row of a thread's warp (cuda)
    seq_blocks = ix.sequence_blocks(Sq, v.spec.width, v.spec.block_size)
    return _per_row(v) | {
        "kv_len": v.expr(sp.Max(ix.row_kv_len(), 0)),
        "blocks": v.expr(ix.num_blocks()),
        "seq_blocks_q": v.expr(seq_blocks),
        "last_len": v.expr(ix.last_block_len()),
        "blocks_before": v.expr(ix.num_blocks(S, jq)),
        "blocks_q_row": v.expr(ix.num_blocks(Sq, jq)),
        "warp_seq": v.expr(ix.FloorDiv(warp0, ix.W)),
        "warp_col": v.expr(ix.Mod(warp0, ix.W)),
        "kv_len_q_last": v.expr(ix.row_kv_len(Sq, ix.W - 1)),
        "split_len": v.expr(ix.kv_split_len(wide)),
    }


@expressions("greedy_prefix_verify")
def _greedy(v: Instance) -> dict:
    draft, target = _idx("draft_tokens"), _idx("target_tokens")
    width = v.spec.width
    pairs = [(i, sp.Ne(draft[b, i], target[b, i])) for i in range(width - 1)]
    accepted = sp.Piecewise(*pairs, (width - 1, True))
    keep = sp.Piecewise((target[b, j], j <= a), (-1, True))
    return {"accepted": v.expr(accepted), "next_token": v.expr(keep)}


@expressions("spec_rejection_verify")
def _rejection(v: Instance) -> dict:
    """Draft i is kept when ``ok(i)`` holds: on a greedy row (temperature <= 0) the draft equals the
    target's token, on a sampled row ``u_i * q_i < p_i`` in float64 (exact: two float32 factors of 24-bit
    significands).  The accepted count nests the tests as selects on ``ok`` itself, never on its negation,
    so that a NaN probability, whose every comparison is false, rejects (``!(x < y)`` is not ``y <= x``)."""
    draft, target = _idx("draft_tokens"), _idx("target_tokens")
    width = v.spec.width

    def wide(name: str, i: int) -> str:
        return f'T.Cast("float64", {v.expr(_idx(name)[b, i])})'

    def ok(i: int) -> str:
        same = v.expr(sp.Eq(draft[b, i], target[b, i]))
        ratio = f"({wide('accept_uniforms', i)} * {wide('draft_probs', i)} < {wide('target_draft_probs', i)})"
        return f"T.if_then_else(greedy, {same}, {ratio})"

    accepted = str(width - 1)
    for i in reversed(range(width - 1)):
        accepted = f"T.if_then_else({ok(i)}, {accepted}, {i})"
    # j < a: the accepted draft (column min(j, W - 2), inside the row for every j); j == a: the row's token
    keep = sp.Piecewise((draft[b, sp.Min(j, width - 2)], j < a), (target[b, j], sp.Eq(j, a)), (-1, True))
    return {
        "greedy": f"{v.expr(_idx('temperature')[b])} <= T.float32(0)",
        "accepted": accepted,
        "next_token": v.expr(keep),
    }


@expressions("prepare_next_draft")
def _next_draft(v: Instance) -> dict:
    new_len = S + a + 1  # S': tokens with valid target KV after this step; a is clamped, S saturated
    full = sp.Eq(a, ix.W - 1)  # only then does the repair row write a real slot (and read the table)
    repair = sp.Piecewise((slot_from_entry(_local("repair_entry"), new_len - 1), full), (_idx("scratch_slot")[0], True))
    return _next_block(v) | {  # the anchor (bonus, new_len), then the MTP draft's two rows
        "repair_pos": v.expr(sp.Max(new_len - 1, 0)),
        "repair_slot": v.expr(repair),
        "repair_entry": v.expr(slot_entry(b, new_len - 1, when=full)),
        "draft_entry": v.expr(slot_entry(b, new_len)),
        "draft_slot": v.expr(slot_from_entry(_local("draft_entry"), new_len)),
        "repair_row": v.expr(ix.row(b, sp.Max(a - 1, 0))),
        "draft_row": v.expr(ix.row(b, a)),
    }


@expressions("prepare_next_block")
def _next_block(v: Instance) -> dict:
    return {"bonus": v.expr(_idx("target_tokens")[b, a]), "new_len": v.expr(sp.Max(S + a + 1, 0))}


@expressions("spec_batch_row_remap")
def _row_remap(v: Instance) -> dict:
    # the template's locals: the source row (-1: none), the moved length and the repair position (>= -1)
    src, n, repair_pos = (sp.Symbol(name, integer=True) for name in ("src", "n", "repair_pos"))
    full = sp.Eq(a, ix.W - 1)
    repair = sp.Piecewise((slot_from_entry(_local("repair_entry"), repair_pos), full), (_idx("scratch_slot")[0], True))
    return {
        "row": v.expr(ix.row(b, j)),
        "src_row": v.expr(ix.row(src, j)),
        "repair_entry": v.expr(slot_entry(b, repair_pos, when=full)),
        "draft_entry": v.expr(slot_entry(b, n)),
        "repair_slot": v.expr(repair),
        "draft_slot": v.expr(slot_from_entry(_local("draft_entry"), n)),
        "repair_row": v.expr(ix.row(b, sp.Max(a - 1, 0))),
        "draft_row": v.expr(ix.row(b, a)),
    }


@expressions("context_kv_update")
def _context(v: Instance) -> dict:
    # a rejected row (j > a) reads no entry: -1, so its slot is -1 too
    return {
        "row": v.expr(ix.row(b, j)),
        "entry": v.expr(slot_entry(b, S + j, when=j <= a)),
        "context_slot": v.expr(slot_from_entry(_local("context_entry"), S + j)),
    }


@expressions("spec_verify_linear_state_update")
def _linear_state(v: Instance) -> dict:
    slots, accepted_row = _idx("state_slots"), _local("state_a")
    return _per_row(v) | {"own": v.expr(slots[b, j]), "committed": v.expr(slots[b, accepted_row])}


@expressions("spec_verify_guard_check")
def _guard_check(v: Instance) -> dict:
    # an entry e maps slots e * BS .. e * BS + BS - 1, all inside int32 up to this one
    at = {"reach_at": gc.REACH_AT, "scratch_at": gc.SCRATCH_AT, "accepted_at": gc.ACCEPTED_AT}
    bits = {"entry_bit": 1 << gc.ENTRY_BIT, "accepted_bit": 1 << gc.ACCEPTED_BIT, "scratch_bit": 1 << gc.SCRATCH_BIT}
    return {"slots": gc.GUARD_SLOTS, "max_entry": (ix.INT32_MAX + 1) // v.spec.block_size - 1} | at | bits


def _vocab_pass(v: Instance) -> dict:
    return {"LOGIT_TILE": LOGIT_TILE}


for _family in VOCAB_FAMILIES:
    expressions(_family)(_vocab_pass)
