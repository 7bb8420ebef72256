"""The launch nest (one thread per sequence, or per row for the head families): the same generated
source as a tile-level ``T.Parallel`` loop.

The templates bind the thread index (cuda) or walk a block's threads in a
serial loop (c) because TileLang's layout inference and vectorize planning of
a ``T.Parallel`` loop cost a third of a variant's lowering.  That is only
sound while both spellings lower to the same code: checked here against the
``T.Parallel`` spelling, rewritten from the rendered program.
"""

from __future__ import annotations

import pytest

from specgen.codegen.lower import lower
from specgen.codegen.templates import render_variant
from specgen.specializations.variants import VariantSpec

pytestmark = pytest.mark.slow


def _as_parallel(program: str, target: str) -> str:
    """``program`` with its launch spelled as ``for i in T.Parallel(THREADS):`` (the body one level deeper)."""
    lines, out, body = program.splitlines(), [], None
    for line in lines:
        stripped = line.strip()
        indent = line[: len(line) - len(line.lstrip())]
        if stripped in ("i = T.get_thread_binding()", "for i in T.serial(THREADS):"):
            out.append(f"{indent}for i in T.Parallel(THREADS):")
            body = indent if target == "cuda" else None  # cuda: what follows at this depth moves in
            continue
        if body is not None and stripped and indent.startswith(body) and not stripped.startswith("return "):
            line = "    " + line
        out.append(line)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("target", ["c", "cuda"])
@pytest.mark.parametrize(
    "spec",
    [VariantSpec("prepare_next_draft", 5, 8, 16), VariantSpec("spec_verify_head_update", 4, 8, 16, "int64", 8)],
    ids=lambda s: s.key,
)
def test_the_launch_lowers_to_the_same_source_as_a_parallel_loop(spec, target):
    program = render_variant(spec, target)
    assert "T.Parallel" not in program
    assert ("i = T.get_thread_binding()" if target == "cuda" else "for i in T.serial(THREADS):") in program
    assert ("T.ceildiv(B * W, THREADS)" in program) == (spec.family == "spec_verify_head_update")  # per row
    parallel = _as_parallel(program, target)
    assert parallel.count("for i in T.Parallel(THREADS):") == 1 and parallel != program
    ours, theirs = lower(program, target, symbol=spec.key), lower(parallel, target, symbol=spec.key)
    assert ours.source == theirs.source and ours.params == theirs.params
