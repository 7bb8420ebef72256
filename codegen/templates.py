"""Render kernel-family templates into TileLang programs, one per variant.

Templates hold the statements of a family; everything that varies per variant
comes from here as text: the argument list (``FAMILIES`` order), the launch
nest and its indentation, and every index expression, built and printed by
``specgen.codegen.indexing``.

    >>> text = render_program("spec_verify_metadata_update", 4, 64, 128)
    >>> "slot_mapping[4*b + j] = T.if_then_else((S + j < 8192)" in text
    True
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from functools import lru_cache
from importlib.resources import files

import jinja2
import sympy as sp

from . import indexing as ix
from ..specializations.families import DEFAULT_NUM_SPLITS, DRAFT_DTYPES, FAMILIES
from ..specializations.targets import TARGETS
from ..specializations.variants import VariantSpec
from .indexing import S, Sq, a, b, j, slot, specialize, tl

_PARAM_INDENT = 8  # inside ``def program():`` and the prim_func's argument list


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    root = files("specgen.templates")
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(root), encoding="utf-8"),
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
        trim_blocks=True, lstrip_blocks=True, autoescape=False)


def load_template(name: str) -> jinja2.Template:
    """``load_template("context_kv_update")`` -> templates/context_kv_update.py.jinja."""
    return _environment().get_template(name if name.endswith(".jinja") else f"{name}.py.jinja")


@dataclass(frozen=True, slots=True)
class Variant:
    family: str
    width: int
    block_table_width: int | None
    block_size: int | None
    draft_dtype: str
    num_splits: int
    threads: int
    target: str

    def spec(self, expr) -> sp.Expr:
        return specialize(expr, self.width, self.block_table_width, self.block_size, self.num_splits)

    def tl(self, expr) -> str:
        return tl(self.spec(expr))


def _idx(name):
    return sp.IndexedBase(name)


def _token_update(v: Variant) -> dict:
    draft = "draft_tokens[b, j]"
    return {"row_first": v.tl(ix.row(b, 0)), "row_draft": v.tl(ix.row(b, j + 1)),
            "draft_value": draft if v.draft_dtype == "int32" else f'T.Cast("int32", {draft})'}


def _metadata(v: Variant) -> dict:
    return {"row": v.tl(ix.row(b, j)), "position": v.tl(S + j), "slot": v.tl(slot(b, S + j)),
            "kv_len": v.tl(S + ix.W), "start": v.tl(ix.row(b, 0)), "total_rows": v.tl(ix.row(ix.B, 0))}


def _tiling(v: Variant) -> dict:
    longest = sp.Symbol("longest", integer=True, nonnegative=True)
    return {"row": v.tl(ix.row(b, j)), "kv_len": v.tl(ix.row_kv_len()),
            "blocks": v.tl(ix.num_blocks()), "seq_blocks_q": v.tl(ix.sequence_blocks(Sq, v.width, v.block_size)),
            "last_len": v.tl(ix.last_block_len()), "total_rows": v.tl(ix.row(ix.B, 0)),
            "kv_len_q_last": v.tl(ix.row_kv_len(Sq, ix.W - 1)), "split_len": v.tl(ix.kv_split_len(longest))}


def _greedy(v: Variant) -> dict:
    draft, target = _idx("draft_tokens"), _idx("target_tokens")
    pairs = [(i, sp.Ne(draft[b, i], target[b, i])) for i in range(v.width - 1)]
    accepted = sp.Piecewise(*pairs, (v.width - 1, True))
    keep = sp.Piecewise((target[b, j], j <= a), (-1, True))
    return {"accepted": v.tl(accepted), "next_token": v.tl(keep)}


def _next_draft(v: Variant) -> dict:
    new_len = S + a + 1  # S': tokens with valid target KV after this step
    repair = sp.Piecewise((slot(b, new_len - 1), sp.Eq(a, ix.W - 1)), (_idx("scratch_slot")[0], True))
    return {"bonus": v.tl(_idx("target_tokens")[b, a]), "new_len": v.tl(new_len),
            "repair_pos": v.tl(new_len - 1), "repair_slot": v.tl(repair),
            "draft_slot": v.tl(slot(b, new_len)), "repair_row": v.tl(ix.row(b, sp.Max(a - 1, 0))),
            "draft_row": v.tl(ix.row(b, a))}


def _context(v: Variant) -> dict:
    kept = sp.Piecewise((slot(b, S + j), j <= a), (-1, True))
    return {"row": v.tl(ix.row(b, j)), "context_slot": v.tl(kept)}


_EXPRESSIONS = {
    "spec_verify_token_update": _token_update,
    "spec_verify_metadata_update": _metadata,
    "spec_verify_attention_tiling_update": _tiling,
    "greedy_prefix_verify": _greedy,
    "prepare_next_draft": _next_draft,
    "context_kv_update": _context,
}


def _params(v: Variant) -> str:
    """The prim_func's arguments, one a line, shapes specialised; B stays symbolic."""
    env = {"B": sp.Symbol("B"), "W": v.width, "BT": v.block_table_width or 0, "NS": v.num_splits}
    lines = []
    for arg in FAMILIES[v.family].args:
        shape = sp.sympify(arg.shape, locals=env)
        dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
        dtype = v.draft_dtype if arg.dtype == "draft" else arg.dtype
        lines.append(f'{arg.name}: T.Tensor(({dims}), "{dtype}"),')
    return textwrap.indent("\n".join(lines), " " * _PARAM_INDENT)


def _launch(v: Variant) -> tuple[str, int]:
    """The launch nest down to ``if b < B:`` and the indentation of the body below it."""
    lines = ["with T.Kernel(T.ceildiv(B, THREADS), threads=THREADS) as bx:"]
    if v.target == "ascend":
        # Ascend's T.Kernel is the core grid; threads exist only inside a SIMT region.
        lines = ["with T.Kernel(T.ceildiv(B, THREADS)) as bx:", "    with T.SimtVF(threads=THREADS):"]
    depth = len(lines)
    pad = "    " * depth
    lines += [pad + "for t in T.Parallel(THREADS):", pad + "    b = bx * THREADS + t",
              pad + "    if b < B:"]
    return textwrap.indent("\n".join(lines), " " * _PARAM_INDENT), _PARAM_INDENT + 4 * (depth + 2)


def _constants(v: Variant) -> str:
    names = {"W": v.width, "BT": v.block_table_width, "BS": v.block_size}
    keep = FAMILIES[v.family].key_params
    out = [f"{k} = {names[k]}" for k in ("W", "BT", "BS") if k in keep]
    if FAMILIES[v.family].uses_num_splits:
        out.append(f"NS = {v.num_splits}")
    return "\n".join(out)


def render_program(family: str, width: int, block_table_width: int | None = None,
                   block_size: int | None = None, draft_dtype: str = "int32",
                   num_splits: int = DEFAULT_NUM_SPLITS, threads: int = 128, target: str = "c") -> str:
    """TileLang Python module text of one variant; ``program()`` returns its prim_func."""
    fam = FAMILIES[family]
    if draft_dtype not in DRAFT_DTYPES or (draft_dtype != "int32" and not fam.has_draft_dtype):
        raise ValueError(f"{family}: no {draft_dtype} draft variant")
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; one of {tuple(TARGETS)}")
    v = Variant(family, width, block_table_width, block_size, draft_dtype, num_splits, threads, target)
    launch, body_indent = _launch(v)
    gl = ix.guards(family, width, block_table_width, block_size)
    ctx = dict(
        family=family, target=target, threads=threads,
        key=VariantSpec(family, width, block_table_width, block_size, draft_dtype).key,
        dialect=TARGETS[target].dialect, constants=_constants(v), params=_params(v), launch=launch,
        body_indent=body_indent, guard_lines="\n".join(f"    {g.expr}  ({g.why})" for g in gl))
    if fam.members:
        ctx["member_bodies"] = [(m, _member_body(v, m)) for m in fam.members]
        return load_template("_composite").render(**ctx)
    return load_template(family).render(**ctx, **_EXPRESSIONS[family](v))


def render_variant(spec: VariantSpec, target: str = "c", threads: int = 128) -> str:
    """``render_program`` of one ``VariantSpec``."""
    return render_program(spec.family, spec.width, spec.block_table_width, spec.block_size, spec.draft_dtype,
                          spec.num_splits or DEFAULT_NUM_SPLITS, threads, target)


def _member_body(v: Variant, member: str) -> str:
    """The per-sequence statements of ``member`` (its template's ``body`` block), for a composite.

    Every member body reads the same ``b``; later members re-read ``S`` from
    ``seq_lens``, which no member writes.
    """
    mv = Variant(member, v.width, v.block_table_width, v.block_size,
                 v.draft_dtype if FAMILIES[member].has_draft_dtype else "int32", v.num_splits, v.threads, v.target)
    template = load_template(member)
    ctx = template.new_context(dict(_EXPRESSIONS[member](mv)))
    return "".join(template.blocks["body"](ctx)).strip("\n")
