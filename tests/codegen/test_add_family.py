"""A kernel family added from outside the package: definition, template, semantics, nothing else.

``toy_shift_positions`` writes ``positions[b * W + j] = S[b] + j + W``.  It is
registered here, its template lives in a temporary folder, and it renders,
lowers and compiles for target c through the same entry points as the
built-in families; the kernel must equal its torch semantics.
"""

from __future__ import annotations

import ctypes

import pytest
import torch

from specgen.codegen.guards import guards
from specgen.codegen.lower import compile_artifact, lower
from specgen.codegen.templates import add_template_dir, remove_template_dir, render_variant
from specgen.runtime.semantics import SEMANTICS, register_semantics, run_semantics
from specgen.specializations.families import ArgSpec, Family, register, shape_of, unregister
from specgen.specializations.variants import Layout, VariantSpec

NAME = "toy_shift_positions"
TEMPLATE = """{% extends "_kernel.py.jinja" %}
{% block body %}
S = seq_lens[b]
for j in T.serial(W):
    positions[{{ expr(ix.row(ix.b, ix.j)) }}] = {{ expr(ix.S + ix.j + ix.W) }}
{% endblock %}
"""

# The same family launched one thread per row: the nest binds r, b = r // W and j = r % W.
ROW_TEMPLATE = """{% extends "_kernel.py.jinja" %}
{% block body %}
S = seq_lens[b]
positions[{{ expr(ix.r) }}] = {{ expr(ix.S + ix.j + ix.W) }}
{% endblock %}
"""


def toy_shift_positions(seq_lens, positions) -> None:
    width = positions.shape[0] // seq_lens.shape[0]
    shifted = seq_lens.long()[:, None] + torch.arange(width, device=seq_lens.device) + width
    positions.copy_(shifted.reshape(-1))


@pytest.fixture(params=["sequence", "row"])
def toy_family(request, tmp_path):
    per_row = request.param == "row"
    (tmp_path / f"{NAME}.py.jinja").write_text(ROW_TEMPLATE if per_row else TEMPLATE, encoding="utf-8")
    family = register(
        Family(
            NAME,
            ("W",),
            (ArgSpec("seq_lens", "int32", "(B,)"), ArgSpec("positions", "int32", "(B * W,)", output=True)),
            threads_per=request.param,
        )
    )
    add_template_dir(tmp_path)
    register_semantics(toy_shift_positions)
    try:
        yield family
    finally:
        SEMANTICS.pop(NAME, None)
        remove_template_dir(tmp_path)
        unregister(NAME)


def test_toy_family_renders_with_the_common_context(toy_family):
    spec = VariantSpec.of(NAME, Layout(4, 64, 128))
    assert spec.key == "toy_shift_positions__w4"
    text = render_variant(spec, "c")
    row = "positions[r] = S + j + 4" if toy_family.per_row else "positions[4*b + j] = S + j + 4"
    assert row in text and "W = 4\n" in text
    assert 'positions: T.Tensor((4*B,), "int32"),' in text
    # no block table, no rules of its own: only the guards every family has
    assert [g.expr for g in guards(spec)] == ["min_seq_len >= 0", "batch >= 1"]
    assert "tilelang.ascend.language" in render_variant(spec, "ascend")


def test_a_per_row_family_needs_w_in_its_key():
    with pytest.raises(ValueError, match="needs W in the key"):
        Family(NAME, ("BS",), (), threads_per="row")
    with pytest.raises(ValueError, match="threads_per 'warp'"):
        Family(NAME, ("W",), (), threads_per="warp")


def test_unregister_removes_the_family(tmp_path):
    register(Family(NAME, ("W",), (ArgSpec("positions", "int32", "(B * W,)", output=True),)))
    unregister(NAME)
    with pytest.raises(LookupError, match="unknown kernel family"):
        VariantSpec(NAME, 4)


def _launch(low, so, tensors, batch):
    fn = getattr(ctypes.CDLL(str(so)), low.entry)
    fn.restype = ctypes.c_int32
    fn.argtypes = [ctypes.c_void_p if p in low.pointer_params else ctypes.c_int32 for p in low.params]
    assert fn(*[tensors[p].data_ptr() if p in low.pointer_params else batch for p in low.params]) == 0


@pytest.mark.slow
def test_toy_family_compiles_and_equals_its_semantics(toy_family, tmp_path):
    spec = VariantSpec.of(NAME, Layout(5, 64, 128))
    low = lower(render_variant(spec, "c"), "c")
    assert low.grid == ("(B * 5 + 127) // 128" if toy_family.per_row else "(B + 127) // 128")
    so = tmp_path / f"{spec.key}.so"
    compile_artifact(low, so)
    g = torch.Generator().manual_seed(0)
    for batch in (1, 2, 127, 300):
        seq = torch.randint(0, 10**6, (batch,), generator=g, dtype=torch.int32)
        got, want = (
            {a.name: torch.full(shape_of(a, batch, spec.width), -777, dtype=torch.int32) for a in toy_family.outputs}
            for _ in range(2)
        )
        _launch(low, so, {"seq_lens": seq} | got, batch)
        run_semantics(NAME, {"seq_lens": seq} | want, block_size=128)
        assert torch.equal(got["positions"], want["positions"]), batch
        assert int(got["positions"][-1]) == int(seq[-1]) + 2 * spec.width - 1
