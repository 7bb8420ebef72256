"""The typed records that alone spell and parse layout and variant keys.

A ``Layout`` is one point of the matrix (verify width, block-table width,
block size, draft dtype); a ``VariantSpec`` is one kernel family specialized
at a layout, keeping only the parameters its key names (``docs/kernels.md``)::

    >>> lay = Layout(4, 64, 128)
    >>> lay.key
    'w4_bt64_bs128_int32'
    >>> VariantSpec.of("spec_verify_token_update", Layout(4, 64, 128, "int64")).key
    'spec_verify_token_update__w4_i64'
    >>> VariantSpec.parse("spec_verify_metadata_update__w4_bt64_bs128").block_size
    128

A family whose key lacks ``W`` has one variant for every width: its records hold
``ANY_WIDTH`` whatever width they are made with, and its key says ``any``::

    >>> VariantSpec.of("spec_target_sample", Layout(4, 64, 128)).key
    'spec_target_sample__any'

Every other layer formats and parses keys through these two records.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from .families import DEFAULT_NUM_SPLITS, DRAFT_DTYPES, FAMILIES, MIN_WIDTH, Family

_LAYOUT_KEY = re.compile(r"^w(\d+)_bt(\d+)_bs(\d+)_(int32|int64)$")
_PART = re.compile(r"^(w|bt|bs)(\d+)$")
_PARAM_FIELD = {"W": ("w", "width"), "BT": ("bt", "block_table_width"), "BS": ("bs", "block_size")}
# a key parameter (W, BT, BS) -> the VariantSpec field that holds it
KEY_PARAM_FIELDS = {p: name for p, (_, name) in _PARAM_FIELD.items()}
# the width of a variant whose family's key lacks W (one variant serves every width; a width-free
# family reads W from its tensors), and the key part that says so: ``spec_target_sample__any``
ANY_WIDTH, ANY = 0, "any"


class KeyFormatError(ValueError):
    """A key that does not follow the ``family__w4_bt64_bs128`` / ``w4_bt64_bs128_int32`` grammar."""


@dataclass(frozen=True, slots=True, order=True)
class Layout:
    width: int
    block_table_width: int
    block_size: int
    draft_dtype: str = "int32"

    @property
    def key(self) -> str:
        return f"w{self.width}_bt{self.block_table_width}_bs{self.block_size}_{self.draft_dtype}"

    @classmethod
    def parse(cls, key: str) -> "Layout":
        m = _LAYOUT_KEY.match(key)
        if not m:
            raise KeyFormatError(f"not a layout key: {key!r} (expected w4_bt64_bs128_int32)")
        return cls(int(m[1]), int(m[2]), int(m[3]), m[4])

    def as_dict(self) -> dict:
        return {
            "width": self.width,
            "block_table_width": self.block_table_width,
            "block_size": self.block_size,
            "draft_dtype": self.draft_dtype,
        }


@dataclass(frozen=True, slots=True, order=True)
class VariantSpec:
    family: str
    width: int
    block_table_width: int | None = None
    block_size: int | None = None
    draft_dtype: str = "int32"
    num_splits: int | None = None

    def __post_init__(self):
        fam = family_of(self.family)
        if "W" not in fam.key_params and self.width != ANY_WIDTH:
            object.__setattr__(self, "width", ANY_WIDTH)  # one variant serves every width
        for p, (_, name) in _PARAM_FIELD.items():
            if p in fam.key_params and getattr(self, name) is None:
                raise KeyFormatError(f"{self.family} needs {name} for its key")
        if self.draft_dtype not in DRAFT_DTYPES:
            raise KeyFormatError(f"draft dtype {self.draft_dtype!r} is not one of {', '.join(DRAFT_DTYPES)}")

    @classmethod
    def of(cls, family: str, layout: Layout, num_splits: int = DEFAULT_NUM_SPLITS) -> "VariantSpec":
        """``family`` at ``layout``, keeping only what the family's key names."""
        fam = family_of(family)
        return cls(
            family,
            layout.width,
            layout.block_table_width if "BT" in fam.key_params else None,
            layout.block_size if "BS" in fam.key_params else None,
            layout.draft_dtype if fam.has_draft_dtype else "int32",
            num_splits if fam.uses_num_splits else None,
        )

    @property
    def spec(self) -> Family:
        return FAMILIES[self.family]

    @property
    def fixed_width(self) -> int | None:
        """The width the variant is specialized for; None where one variant serves every width."""
        return None if self.width == ANY_WIDTH else self.width

    @property
    def suffix(self) -> str:
        """``w4_bt64_bs128``; int64 drafts add ``_i64``; ``any`` in place of ``w4`` where the key lacks W."""
        parts = [] if "W" in self.spec.key_params else [ANY]
        parts += [f"{_PARAM_FIELD[p][0]}{getattr(self, _PARAM_FIELD[p][1])}" for p in self.spec.key_params]
        if self.spec.has_draft_dtype and self.draft_dtype != "int32":
            parts.append("i64")
        return "_".join(parts)

    @property
    def key(self) -> str:
        return f"{self.family}__{self.suffix}"

    def with_dtype(self, draft_dtype: str) -> "VariantSpec":
        return replace(self, draft_dtype=draft_dtype if self.spec.has_draft_dtype else "int32")

    @classmethod
    def parse(cls, key: str) -> "VariantSpec":
        family, sep, suffix = key.partition("__")
        if not sep:
            raise KeyFormatError(f"not a variant key: {key!r} (expected family__w4_bt64_bs128)")
        values: dict = {}
        dtype = "int32"
        for part in suffix.split("_"):
            m = _PART.match(part)
            if m:
                values[next(f for k, f in _PARAM_FIELD.values() if k == m[1])] = int(m[2])
            elif part == ANY:
                values["width"] = ANY_WIDTH
            elif part == "i64":
                dtype = "int64"
            else:
                raise KeyFormatError(f"not a variant key: {key!r} (unknown part {part!r})")
        if "width" not in values:
            raise KeyFormatError(f"not a variant key: {key!r} (no width)")
        spec = cls(family, draft_dtype=dtype, **values)
        if spec.key != key:
            raise KeyFormatError(f"not a variant key: {key!r} (the family's key reads {spec.key!r})")
        return spec


def family_of(name: str) -> Family:
    """The family called ``name``; ``LookupError`` naming the known families otherwise."""
    if name not in FAMILIES:
        raise UnknownFamily(f"unknown kernel family {name!r}; known: {', '.join(sorted(FAMILIES))}")
    return FAMILIES[name]


class UnknownFamily(LookupError):
    """The family name is not one of specgen's kernel families."""


def build_command(spec: VariantSpec, target: str = "c", width: int | None = None) -> str:
    """The ``specgen build`` command line that makes ``spec`` for ``target``.

    A variant for every width is made by a build at any width: ``width`` (the
    caller's), else ``MIN_WIDTH``.
    """
    cmd = f"specgen build --widths {spec.fixed_width or width or MIN_WIDTH}"
    if spec.block_table_width is not None:
        cmd += f" --block-table-widths {spec.block_table_width}"
    if spec.block_size is not None:
        cmd += f" --block-sizes {spec.block_size}"
    if target != "c":
        cmd += f" --target {target}"
    if spec.draft_dtype != "int32":
        cmd += f" --draft-dtypes {spec.draft_dtype}"
    return cmd


def variants_command(
    specs,
    target: str = "c",
    *,
    width: int | None = None,
    block_table_width: int | None = None,
    block_size: int | None = None,
) -> str:
    """The ``specgen build`` command that makes ``specs`` for ``target`` and as little else as it can.

    It names their widths, block-table widths, block sizes, draft dtypes and
    families (a build adds to its folder, so what else is there stays).  A
    family whose key has no block-table width or block size builds at the
    ``block_table_width`` / ``block_size`` given, where the caller knows its
    layout (the layout of the plans recorded beside it); a variant for every
    width, at ``width`` where no other spec names one (else ``MIN_WIDTH``)::

        >>> variants_command([VariantSpec("spec_verify_token_update", 8, draft_dtype="int64")], block_size=16)
        'specgen build --widths 8 --block-sizes 16 --draft-dtypes int64 --families spec_verify_token_update'
    """
    specs = list(specs)

    def values(field: str, given: int | None) -> list[int]:
        found = {getattr(s, field) for s in specs if getattr(s, field) is not None}
        return sorted(found or ({given} if given is not None else set()))

    widths = sorted({s.fixed_width for s in specs if s.fixed_width is not None}) or [width or MIN_WIDTH]
    cmd = "specgen build --widths " + ",".join(map(str, widths))
    for option, field, given in (
        ("--block-table-widths", "block_table_width", block_table_width),
        ("--block-sizes", "block_size", block_size),
    ):
        if values(field, given):
            cmd += f" {option} {','.join(map(str, values(field, given)))}"
    cmd += f" --draft-dtypes {','.join(sorted({s.draft_dtype for s in specs}))}"
    cmd += f" --families {','.join(sorted({s.family for s in specs}))}"
    return cmd + (f" --target {target}" if target != "c" else "")
