"""The specialization matrix: which kernel variants a build makes.

The default reproduces the table of xLLM #1962 (docs/references.md): MTP3/4/5 -> verify
widths 4/5/6 with block-table width 64 and block size 128 (``w4``,
``w4_bt64_bs128``, ``w4_bs128``), int32 and int64 draft tokens, plus the
block-draft widths 8 and 16 (DSpark ``--depth 7``, DFlash ``--depth 15``) for
the boundaries a block draft's graph runs (``draft-to-verify`` or, over a
hybrid target, ``draft-to-verify-linear``, and ``context-kv`` or, for a sampling
batch, ``context-kv-sampled``), int32 drafts only.  Widen it on
the command line (``--widths 2-16 --block-sizes 16,128``) or with a TOML file:

    widths = [4, 5, 6]
    block_table_widths = [64]
    block_sizes = [128]
    draft_dtypes = ["int32", "int64"]
    block_widths = [8, 16]
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path

from .families import DEFAULT_NUM_SPLITS, DRAFT_DTYPES, MAX_WIDTH, MIN_WIDTH
from .plan import CONTEXT_KV, DRAFT_TO_VERIFY, LINEAR_DRAFT_TO_VERIFY, SAMPLED_CONTEXT_KV
from .variants import Layout

# what a block draft's specgen graph runs (over a plain or a hybrid target; greedy or sampling)
BLOCK_BOUNDARIES = (DRAFT_TO_VERIFY, CONTEXT_KV, LINEAR_DRAFT_TO_VERIFY, SAMPLED_CONTEXT_KV)


class MatrixError(ValueError):
    pass


@dataclass(frozen=True)
class Matrix:
    widths: tuple[int, ...] = (4, 5, 6)
    block_table_widths: tuple[int, ...] = (64,)
    block_sizes: tuple[int, ...] = (128,)
    draft_dtypes: tuple[str, ...] = DRAFT_DTYPES
    num_splits: int = DEFAULT_NUM_SPLITS
    block_widths: tuple[int, ...] = ()  # extra widths of the block-draft boundaries, int32 only

    def __post_init__(self):
        for w in (*self.widths, *self.block_widths):
            if not MIN_WIDTH <= w <= MAX_WIDTH:
                raise MatrixError(f"width {w} is outside {MIN_WIDTH}..{MAX_WIDTH}")
        for name in ("block_table_widths", "block_sizes"):
            for v in getattr(self, name):
                if v < 1:
                    raise MatrixError(f"{name.replace('_', ' ')[:-1]} must be positive, got {v}")
        for d in self.draft_dtypes:
            if d not in DRAFT_DTYPES:
                raise MatrixError(f"draft dtype {d!r} is not one of {', '.join(DRAFT_DTYPES)}")
        if not (self.widths and self.block_table_widths and self.block_sizes and self.draft_dtypes):
            raise MatrixError("the matrix is empty")
        if self.num_splits < 1:
            raise MatrixError("num_splits must be positive")

    def layouts(self, boundary: str | None = None):
        """Every ``Layout`` (width, block-table width, block size, draft dtype), in a fixed order.

        For a block-draft boundary the ``block_widths`` not in ``widths`` follow, with int32 drafts.
        """
        extra = [w for w in self.block_widths if w not in self.widths] if boundary in BLOCK_BOUNDARIES else []
        for w in (*self.widths, *extra):
            for bt in self.block_table_widths:
                for bs in self.block_sizes:
                    for d in self.draft_dtypes if w in self.widths else ("int32",):
                        yield Layout(w, bt, bs, d)

    def with_overrides(self, **kw) -> "Matrix":
        """Given fields replaced; widths given without ``block_widths`` mean exactly those widths."""
        given = {k: tuple(v) if isinstance(v, list) else v for k, v in kw.items() if v}
        if "widths" in given and "block_widths" not in given:
            given["block_widths"] = ()
        return replace(self, **given)


DEFAULT = Matrix(block_widths=(8, 16))


def _toml():
    try:
        import tomllib  # Python 3.11+
    except ModuleNotFoundError:  # Python 3.10: the same parser, packaged
        import tomli as tomllib
    return tomllib


def load_toml(path: str | Path) -> Matrix:
    tomllib = _toml()
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise MatrixError(f"{path}: {e}") from None
    known = {f.name for f in fields(Matrix)}
    unknown = set(data) - known
    if unknown:
        raise MatrixError(f"{path}: unknown keys {sorted(unknown)} (known: {sorted(known)})")
    return DEFAULT.with_overrides(**data)
