"""Render kernel-family templates into TileLang programs, one per variant.

Templates hold the statements of a family; everything that varies per variant
comes from here as text: the argument list (``FAMILIES`` order), the launch
nest and its indentation, the guards, and the index expressions
(``codegen.expressions``), built and printed by ``codegen.indexing``.

    >>> from specgen.specializations.variants import VariantSpec
    >>> text = render_variant(VariantSpec("spec_verify_metadata_update", 4, 64, 128))
    >>> "slot_entry = T.if_then_else(T.And((S + j >= 0), (S + j < 8192))" in text
    True

Templates are looked up in the package's ``templates/`` folder, then in the
folders given to ``add_template_dir`` (families that live outside specgen).
"""

from __future__ import annotations

import dataclasses
import textwrap
from functools import lru_cache
from importlib.resources import files
from pathlib import Path

import jinja2
import sympy as sp
from jinja2 import pass_context

from ..specializations.expr import expression_names
from ..specializations.families import DEFAULT_NUM_SPLITS, FAMILIES
from ..specializations.targets import TARGETS
from ..specializations.variants import VariantSpec, family_of
from . import indexing as ix
from .expressions import Instance, context
from .guards import guards

_PARAM_INDENT = 8  # inside ``def program():`` and the prim_func's argument list
_EXTRA_DIRS: list[str] = []


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    root = str(files("specgen.templates"))
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([root, *_EXTRA_DIRS], encoding="utf-8"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["lanes"], env.filters["lane0"], env.filters["chunks"] = _lanes, _lane0, _chunks
    return env


def _phase(text: str, head: str, tail: str) -> str:
    """``text`` (a filter block's statements) under ``head`` and before ``tail``, where the template put it."""
    body = textwrap.dedent(text).strip("\n")
    first = text.strip("\n").split("\n")[0]
    pad = first[: len(first) - len(first.lstrip())]
    if head:
        body = head + "\n" + textwrap.indent(body, "    ")
    return textwrap.indent(body + ("\n" + tail if tail else ""), pad) + "\n"


@pass_context
def _lanes(ctx, text: str) -> str:
    """``{% filter lanes %}...{% endfilter %}``: one phase of a block family, run by every lane ``i``.

    On ``cuda`` each thread runs the statements as its lane ``i``, then the
    block synchronises (``T.sync_threads()``); on ``c`` (no threads) they run
    in ``for i in T.serial(THREADS):``, lane after lane.
    """
    if ctx["target"] == "c":
        return _phase(text, "for i in T.serial(THREADS):", "")
    return _phase(text, "", "T.sync_threads()")


@pass_context
def _lane0(ctx, text: str) -> str:
    """``{% filter lane0 %}...{% endfilter %}``: statements run once per row of a block family (its results):
    by lane 0 on ``cuda`` (``if i == 0:``), as they stand on ``c``; no lane ``i`` is bound on ``c`` there."""
    return _phase(text, "if i == 0:" if ctx["target"] != "c" else "", "")


@pass_context
def _chunks(ctx, text: str) -> str:
    """``{% filter chunks %}...{% endfilter %}``: statements run for every chunk ``ch`` of a row of a block family
    whose shapes name ``C``: on ``cuda`` the launch binds ``ch`` (each chunk its own block), on ``c`` (one block a
    row) they run in ``for ch in T.serial(C):``."""
    return _phase(text, "for ch in T.serial(C):" if ctx["target"] == "c" else "", "")


def add_template_dir(path: str | Path) -> None:
    """Look for templates in ``path`` too, after the package's own folder."""
    if str(path) not in _EXTRA_DIRS:
        _EXTRA_DIRS.append(str(path))
        _environment.cache_clear()


def remove_template_dir(path: str | Path) -> None:
    """Undo ``add_template_dir``."""
    if str(path) in _EXTRA_DIRS:
        _EXTRA_DIRS.remove(str(path))
        _environment.cache_clear()


def load_template(name: str) -> jinja2.Template:
    """``load_template("context_kv_update")`` -> templates/context_kv_update.py.jinja."""
    return _environment().get_template(name if name.endswith(".jinja") else f"{name}.py.jinja")


def _dim(d: sp.Expr) -> str:
    """A shape's dimension as TileLang source: sympy's ``floor(V/64 + 63/64)`` back to ``(V + 63) // 64``."""
    if isinstance(d, sp.floor):
        num, den = sp.fraction(sp.together(d.args[0]))
        return f"({num}) // {den}"
    return str(d)


def _params(v: Instance) -> str:
    """The prim_func's arguments, one a line, shapes specialised; B (and V, C, a width-free W) stay symbolic."""
    s = v.spec
    env = {"BT": s.block_table_width or 0, "NS": v.num_splits, **{n: sp.Symbol(n) for n in "BVCW"}}
    if s.fixed_width is not None:
        env["W"] = s.fixed_width
    lines = []
    for arg in FAMILIES[s.family].args:
        shape = sp.sympify(arg.shape, locals=env)
        dims = ", ".join(_dim(d) for d in shape) + ("," if len(shape) == 1 else "")
        dtype = s.draft_dtype if arg.dtype == "draft" else arg.dtype
        lines.append(f'{arg.name}: T.Tensor(({dims}), "{dtype}"),')
    return textwrap.indent("\n".join(lines), " " * _PARAM_INDENT)


def _launch(v: Instance) -> tuple[str, int]:
    """The launch nest down to the guard of a live thread and the indentation of the body below it.

    One thread per sequence (``b = bx * THREADS + i``, ``if b < B:``), or for
    a per-row family one per verification row: ``r`` runs over ``B * W`` and
    the body sees ``b = r // W`` and ``j = r % W`` (``if b < B:``).  ``cuda`` binds the thread
    index itself, ``c`` (no SIMT threads) walks a block's threads in a serial
    loop.  Neither is a tile-level ``T.Parallel`` loop: TileLang's layout
    inference and vectorize planning of such a loop (Z3 proofs over every
    index expression) took ~40% of a variant's lowering and changed nothing in
    the generated source, which is the same text either way
    (``tests/codegen/test_launch.py``).

    A block family runs one block per row, ``r = bx`` of its ``rows`` (a
    ``"B * W"`` family's body sees ``b`` and ``j`` of ``r`` too).  ``cuda``
    binds the lane ``i``; ``c`` binds none (TileLang's c target refuses a
    thread index in ``T.Kernel``): the template walks the lanes itself,
    ``{% filter lanes %}`` (``_lanes``).  The grid is the rows, so no guard.
    A family whose shapes name ``C`` (chunks per row) runs ``C`` blocks a row
    on ``cuda``, ``r = bx // C`` and its chunk ``ch = bx % C``; on ``c`` one
    block a row walks the chunks itself (``{% filter chunks %}``, ``_chunks``).
    A width-free family's ``b`` and ``j`` divide by the run-time ``W``.
    """
    fam = FAMILIES[v.spec.family]
    if fam.threads_per == "block":
        return _block_launch(v, fam.rows, fam.uses_chunks)
    per_row = fam.per_row
    count = "B * W" if per_row else "B"
    lines = [f"with T.Kernel(T.ceildiv({count}, THREADS), threads=THREADS) as bx:"]
    if v.target == "ascend":
        # Ascend's T.Kernel is the core grid; threads exist only inside a SIMT region.
        lines = [f"with T.Kernel(T.ceildiv({count}, THREADS)) as bx:", "    with T.SimtVF(threads=THREADS):"]
    depth = len(lines)
    pad = "    " * depth
    if v.target == "cuda":
        lines += [pad + "i = T.get_thread_binding()"]
    else:
        loop = "T.serial(THREADS)" if v.target == "c" else "T.Parallel(THREADS)"
        lines += [pad + f"for i in {loop}:"]
        pad, depth = pad + "    ", depth + 1
    if per_row:
        # b < B is r < B * W, spelled so that TileLang sees that every b-indexed access is in bounds.
        # both spellings of a live thread: TileLang proves the r-indexed accesses in bounds from
        # r < B * W and the b-indexed ones from b < B (neither follows from the other when W is a power of 2)
        lines += [
            pad + "r = bx * THREADS + i",
            pad + f"b = {v.expr(ix.FloorDiv(ix.r, ix.W))}",
            pad + f"j = {v.expr(ix.Mod(ix.r, ix.W))}",
            pad + "if r < B * W:",
            pad + "    if b < B:",
        ]
        depth += 1
    else:
        lines += [pad + "b = bx * THREADS + i", pad + "if b < B:"]
    return textwrap.indent("\n".join(lines), " " * _PARAM_INDENT), _PARAM_INDENT + 4 * (depth + 1)


def _block_grid(v: Instance, rows: str, chunks: bool) -> str:
    """The blocks of a block family: its rows, times ``C`` for a chunked family on ``cuda`` (a block a chunk)."""
    return f"({rows}) * C" if chunks and v.target == "cuda" else rows


def _block_launch(v: Instance, rows: str, chunks: bool) -> tuple[str, int]:
    lines = [f"with T.Kernel({_block_grid(v, rows, chunks)}, threads=THREADS) as bx:"]
    if v.target == "cuda":
        lines.append("    i = T.get_thread_binding()")
    per_width = "W" in expression_names(rows)
    if chunks and v.target == "cuda":
        # the divisions once, into registers; the names the body reads are those registers clamped into the
        # grid (a no-op on the grid the runtime launches), so that TileLang proves every access in bounds and
        # adds no check of its own to the body's loops, and no index re-divides by C or W
        lines += ['    rv = T.alloc_var("int32", init=bx // C)', '    cv = T.alloc_var("int32", init=bx % C)']
        lines += [f"    r = T.max(T.min(rv, {rows} - 1), 0)", "    ch = T.max(T.min(cv, C - 1), 0)"]
        if per_width:
            lines += [f'    bv = T.alloc_var("int32", init={v.expr(ix.FloorDiv(ix.r, ix.W))})']
            lines += [f'    jv = T.alloc_var("int32", init={v.expr(ix.Mod(ix.r, ix.W))})']
            lines += ["    b = T.max(T.min(bv, B - 1), 0)", "    j = T.max(T.min(jv, W - 1), 0)"]
        return textwrap.indent("\n".join(lines), " " * _PARAM_INDENT), _PARAM_INDENT + 4
    lines += ["    r = bx"]
    if per_width:
        lines += [f"    b = {v.expr(ix.FloorDiv(ix.r, ix.W))}", f"    j = {v.expr(ix.Mod(ix.r, ix.W))}"]
    return textwrap.indent("\n".join(lines), " " * _PARAM_INDENT), _PARAM_INDENT + 4


def _constants(v: Instance) -> str:
    s = v.spec
    names = {"W": s.width, "BT": s.block_table_width, "BS": s.block_size}
    fam = FAMILIES[s.family]
    out = [f"{k} = {names[k]}" for k in ("W", "BT", "BS") if k in fam.key_params]
    if fam.uses_num_splits:
        out.append(f"NS = {v.num_splits}")
    return "\n".join(out)


def _frame(v: Instance) -> dict:
    """What ``_kernel.py.jinja`` needs around a family's body."""
    launch, body_indent = _launch(v)
    fam = FAMILIES[v.spec.family]
    launch_doc = {
        "row": "One thread per verification row r = b * W + j",
        "block": f"One block of THREADS threads per row r (rows = {fam.rows})",
    }.get(fam.threads_per, "One thread per sequence")
    if fam.uses_chunks:
        launch_doc = (
            f"C blocks of THREADS threads per row r (rows = {fam.rows}), chunk ch = bx % C"
            if v.target == "cuda"
            else f"One block of THREADS threads per row r (rows = {fam.rows}) walking its C chunks"
        )
    bound = ["batch B"] + ["vocabulary V"] * fam.uses_vocab + ["chunks per row C"] * fam.uses_chunks
    bound += ["width W"] * fam.width_free
    return dict(
        family=v.spec.family,
        target=v.target,
        threads=v.threads,
        key=v.spec.key,
        threads_per=fam.threads_per,
        rows=fam.rows,
        grid=_block_grid(v, fam.rows, fam.uses_chunks),  # the blocks: the module's ROWS, the runtime's grid
        uses_vocab=fam.uses_vocab,
        uses_chunks=fam.uses_chunks,
        uses_width=fam.width_free,
        launch_doc=launch_doc,
        bound=", ".join(bound[:-1]) + " and " + bound[-1] if len(bound) > 1 else bound[0],
        dialect=TARGETS[v.target].dialect,
        constants=_constants(v),
        params=_params(v),
        launch=launch,
        body_indent=body_indent,
        guard_lines="\n".join(f"    {g.expr}  ({g.why})" for g in guards(v.spec)),
    )


def render_variant(spec: VariantSpec, target: str = "c", threads: int = 128) -> str:
    """TileLang Python module text of ``spec`` for ``target``; ``program()`` returns its prim_func."""
    fam = family_of(spec.family)
    if spec.draft_dtype != "int32" and not fam.has_draft_dtype:
        raise ValueError(f"{spec.family}: no {spec.draft_dtype} draft variant")
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; one of {tuple(TARGETS)}")
    if target == "ascend" and fam.threads_per == "block":
        raise ValueError("block families are not rendered for ascend")
    threads = fam.threads or threads  # a family that fixes its block (the vocabulary pass's lanes) keeps it
    if target == "cuda" and threads % 32:
        # the tiling scan's shuffle masks name whole warps' lanes
        raise ValueError(f"cuda blocks of whole warps only: {threads} threads is no multiple of 32")
    v = Instance(spec, target, threads)
    if fam.members:
        bodies = [(m, _member_body(v, m)) for m in fam.members]
        return load_template("_composite").render(**_frame(v), member_bodies=bodies)
    return load_template(spec.family).render(**_frame(v), **context(v))


def render_program(
    family: str,
    width: int,
    block_table_width: int | None = None,
    block_size: int | None = None,
    draft_dtype: str = "int32",
    num_splits: int = DEFAULT_NUM_SPLITS,
    threads: int = 128,
    target: str = "c",
) -> str:
    """``render_variant`` spelled with the layout's numbers (tests and examples)."""
    splits = num_splits if family_of(family).uses_num_splits else None
    spec = VariantSpec(family, width, block_table_width, block_size, draft_dtype, splits)
    return render_variant(spec, target, threads)


def _member_body(v: Instance, member: str) -> str:
    """The per-thread statements of ``member`` (its template's ``body`` block), for a composite.

    Every member body reads the same ``b`` (and ``r``, ``j`` of a per-row
    launch, which all members share); later members re-read ``S`` from
    ``seq_lens``, which no member writes.
    """
    dtype = v.spec.draft_dtype if FAMILIES[member].has_draft_dtype else "int32"
    mv = dataclasses.replace(v, spec=dataclasses.replace(v.spec, family=member, draft_dtype=dtype))
    template = load_template(member)
    ctx = template.new_context({**context(mv), "target": v.target})
    return "".join(template.blocks["body"](ctx)).strip("\n")
