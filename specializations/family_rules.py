"""The rules a family's launch and shapes follow, checked when its ``Family`` record is made.

``specializations.families`` calls ``check_family`` from ``Family.__post_init__``; the
record is read through its fields and properties only, so this module does not import it.

The run-time dimensions of a launch are read from its tensors: ``V`` (the vocabulary)
and ``C`` (a block family's chunks per row) where shapes name them, and ``W`` (the verify
width) for a width-free family, one whose key lacks ``W`` while its shapes or rows name it.
Each needs an argument with an axis of that bare extent (``(B, W)``, ``(B, V)``,
``(B, C, 4)``) to be read from.  A per-row launch (``B * W`` threads) keeps ``W`` in its key;
a block family may read it at run time instead.
"""

from __future__ import annotations

from .expr import SHAPE_NAMES, bare_axis, expression_names, validate_expression

THREADS_PER = ("sequence", "row", "block")


def names_width(fam) -> bool:
    """Whether ``fam``'s rows or an argument's shape name the verify width ``W``."""
    return any("W" in expression_names(text) for text in (fam.rows or "B", *(a.shape for a in fam.args)))


def check_family(fam) -> None:
    """Raise ``ValueError`` naming the family where its record breaks a rule above."""
    if fam.threads_per not in THREADS_PER:
        raise ValueError(f"{fam.name}: threads_per {fam.threads_per!r} is not one of {', '.join(THREADS_PER)}")
    if bool(fam.rows) != (fam.threads_per == "block"):
        raise ValueError(f"{fam.name}: a block launch, and only it, names its rows (rows={fam.rows!r})")
    validate_expression(fam.rows or "B", SHAPE_NAMES)
    if "W" not in fam.key_params and fam.threads_per == "row":
        raise ValueError(f"{fam.name}: a launch of one thread per row (B * W threads) needs W in the key")
    for dim, used in (("V", fam.uses_vocab), ("C", fam.uses_chunks), ("W", fam.width_free)):
        if used and all(bare_axis(a.shape, dim) is None for a in fam.args):
            hint = " (or name W in the key)" if dim == "W" else ""
            raise ValueError(f"{fam.name}: no argument has an axis of extent {dim}: it cannot be read at launch{hint}")
    if "C" in expression_names(fam.rows or "B") or fam.uses_chunks and fam.threads_per != "block":
        raise ValueError(f"{fam.name}: only a block family's shapes name C (its chunks per row), never its rows")
