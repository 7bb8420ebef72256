"""The token update reads both of a row's candidates with no branch around either read.

Row ``j == 0`` takes ``last_tokens[b]``, every other row ``draft_tokens[b, j - 1]``.  Written as an
``if``/``else`` over two loads, nvcc kept the branch at the even widths that are not powers of two
(6, 10, 12, 14): the token loads then waited behind it, and the sequence-length load and the
block-table load after them, one more global round trip per row, about 0.4 us of the composite
head's 2-3 us on the H200 at every batch.  Both reads are now unconditional (the draft column
``max(j - 1, 0)`` stays inside the ``W - 1 >= 1`` columns) and a select picks the token.  The CUDA
fuzz (``test_fuzz_cuda.py``) checks the values; this checks the shape of the code that makes it fast.
"""

from __future__ import annotations

import pytest

from specgen.codegen.lower import lower
from specgen.codegen.templates import render_variant
from specgen.specializations.variants import VariantSpec

WIDTHS = [2, 6, 12, 16]


def _token_member(program: str) -> list[str]:
    """The lines of the token update: the standalone family's body, or the composite's member."""
    lines = program.splitlines()
    start = next((n for n, line in enumerate(lines) if "--- spec_verify_token_update ---" in line), None)
    if start is None:
        start = next(n for n, line in enumerate(lines) if "first = T.alloc_var" in line) - 1
    end = next(
        (n for n in range(start + 1, len(lines)) if "# ---" in lines[n] or lines[n].strip().startswith("return ")),
        len(lines),
    )
    return [line.strip() for line in lines[start + 1 : end] if line.strip() and not line.strip().startswith("#")]


@pytest.mark.parametrize("family", ["spec_verify_token_update", "spec_verify_head_update"])
@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("target", ["c", "cuda"])
def test_the_token_reads_have_no_branch_around_them(family, dtype, target):
    for width in WIDTHS:
        spec = VariantSpec(
            family,
            width,
            64 if family != "spec_verify_token_update" else None,
            128 if family != "spec_verify_token_update" else None,
            dtype,
        )
        body = _token_member(render_variant(spec, target))
        assert not any(line.startswith(("if ", "else")) for line in body), body
        assert "first = last_tokens[b]" in body
        drafted = [line for line in body if line.startswith("drafted = ") and "alloc_var" not in line]
        assert len(drafted) == 1 and "draft_tokens[b, T.max(" in drafted[0] and "j - 1" in drafted[0], drafted
        assert body[-1].startswith("tokens[") and "T.if_then_else(j == 0, first, drafted)" in body[-1]


@pytest.mark.slow
@pytest.mark.parametrize("width", [6, 12])
def test_the_lowered_cuda_reads_both_candidates_unconditionally(width):
    spec = VariantSpec("spec_verify_head_update", width, 64, 128)
    source = lower(render_variant(spec, "cuda"), "cuda", symbol=spec.key).source
    lines = source.splitlines()
    first = next(n for n, line in enumerate(lines) if line.strip().startswith("first = last_tokens["))
    drafted = next(n for n, line in enumerate(lines) if line.strip().startswith("drafted = draft_tokens["))
    indent = lambda n: len(lines[n]) - len(lines[n].lstrip())  # noqa: E731
    guard = next(n for n in range(first, -1, -1) if lines[n].strip().startswith("if ("))
    # the row guard (r < B * W) is the only branch around them: no test of j sits in between
    assert f"< (B * {width})" in lines[guard] and indent(first) == indent(drafted) == indent(guard) + 2
    assert drafted == first + 1
