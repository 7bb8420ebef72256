"""Width-free families: a key without ``W`` while shapes or rows name it, so ``W`` is read from the tensors.

``toy_width_free`` lives only here: a block per verification row ``r = b * W + j`` of ``x[B * W, V]``
writes ``tokens[b, j] = base[b, j] + x[r, V - 1] + 1000 * b + 10 * j + W``; ``W`` is read from ``base``
(the first bare ``W`` axis), passed to the kernel as an int32 and divides ``r`` at run time.  One variant
serves every width.  (TileLang binds ``B`` and ``W`` from the shapes in argument order, so an argument
that names both only in a product, ``(B * W, V)``, comes after one that gives them.)
The vocabulary pass's families are width-free too: a build at widths 3 and 4 makes one variant of each,
which runs at both widths against its torch semantics.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from oracles.toy_builds import build_c_folder, fake_cuda_launcher
from oracles.vocab_check import check_against_semantics

from specgen.codegen.templates import add_template_dir, remove_template_dir, render_variant
from specgen.runtime import loaders
from specgen.runtime.guards import KernelArgumentError, check_tensors, width_of
from specgen.runtime.library import KernelLibrary, load_library
from specgen.runtime.manifest import ManifestError, load_manifest, parse_manifest
from specgen.specializations.families import FAMILIES, ArgSpec, Family, register, shape_of, unregister
from specgen.specializations.variants import ANY_WIDTH, VariantSpec
from specgen.specializations.vocab_sample import DRAFT_SAMPLE, TARGET_SAMPLE, VOCAB_FAMILIES

NAME = "toy_width_free"
ARGS = (
    ArgSpec("base", "int32", "(B, W)"),
    ArgSpec("x", "float32", "(B * W, V)"),
    ArgSpec("tokens", "int32", "(B, W)", output=True),
)
PARAMS = ["base", "tokens", "x", "B", "V", "W"]  # TileLang's order: the pointers, then the scalars, by name
TEMPLATE = """{% extends "_kernel.py.jinja" %}
{% block body %}
{% filter lane0 %}
tokens[b, j] = base[b, j] + T.Cast("int32", x[r, V - 1]) + b * 1000 + j * 10 + W
{% endfilter %}
{% endblock %}
"""
SAMPLED_TAILS = ("verify-to-draft-sampled", "context-kv-sampled")


def _want(base: torch.Tensor, x: torch.Tensor, width: int) -> torch.Tensor:
    r = torch.arange(x.shape[0])
    return base + (x[:, -1] + (r // width) * 1000 + (r % width) * 10 + width).to(torch.int32).view_as(base)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    folder = tmp_path_factory.mktemp("width_free_templates")
    (folder / f"{NAME}.py.jinja").write_text(TEMPLATE, encoding="utf-8")
    family = register(Family(NAME, (), ARGS, threads_per="block", rows="B * W"))
    add_template_dir(folder)
    try:
        yield family
    finally:
        remove_template_dir(folder)
        unregister(NAME)


@pytest.fixture(scope="module")
def folder(toy, tmp_path_factory):
    """A build folder holding the toy's one c variant, made the way ``specgen build`` makes one."""
    return build_c_folder(tmp_path_factory.mktemp("width_free_build"), NAME, VariantSpec(NAME, 4))


def test_a_block_family_without_w_in_its_key_is_width_free(toy):
    assert toy.width_free and not FAMILIES["greedy_prefix_verify"].width_free
    spec = VariantSpec(NAME, 4)
    assert spec == VariantSpec(NAME, 7) and spec.width == ANY_WIDTH and spec.key == f"{NAME}__any"
    assert VariantSpec.parse(spec.key) == spec
    for target in ("c", "cuda"):
        text = render_variant(spec, target)
        assert '    W = T.dynamic("W")\n' in text and "\nW = " not in text  # no constant W
        assert "b = T.floordiv(r, W)\n" in text and "j = T.floormod(r, W)\n" in text
        assert 'tokens: T.Tensor((B, W), "int32")' in text and 'ROWS = "B * W"' in text
    # a chunked one (the vocabulary pass) on cuda: the row of the block first, then b and j of the row
    text = render_variant(VariantSpec(TARGET_SAMPLE, 4), "cuda")
    assert "r = T.max(T.min(rv, B * W - 1), 0)\n            ch = T.max(T.min(cv, C - 1), 0)\n" in text
    assert 'ch = T.max(T.min(cv, C - 1), 0)\n            bv = T.alloc_var("int32", init=T.floordiv(r, W))\n' in text
    assert 'jv = T.alloc_var("int32", init=T.floormod(r, W))\n' in text
    assert "T.Kernel((B * W) * C, threads=THREADS)" in text


@pytest.mark.parametrize("width", [2, 3, 5])
def test_the_one_c_variant_runs_at_every_width(folder, width):
    record = json.loads((folder / "manifest.json").read_text())["variants"][0]
    assert record["params"] == PARAMS and record["width"] == ANY_WIDTH and record["launch"]["grid"] == "B * W"
    lib = KernelLibrary(folder)
    assert lib.variants() == [f"{NAME}__any"] and lib.has(NAME, width)
    kernel = lib.get(NAME, 4)  # the width a caller passes does not matter: the tensors say it
    gen = torch.Generator().manual_seed(width)
    for batch, vocab in ((1, 3), (3, 7)):
        base = torch.randint(-9, 9, (batch, width), generator=gen, dtype=torch.int32)
        x = torch.randint(-50, 50, (batch * width, vocab), generator=gen).float()
        tokens = torch.full((batch, width), -777, dtype=torch.int32)
        kernel(base, x, tokens)
        assert torch.equal(tokens, _want(base, x, width)), (width, batch, tokens)


def test_a_wrong_width_is_refused_before_a_launch(folder):
    kernel = KernelLibrary(folder).get(NAME, 4)
    base, x, tokens = (
        torch.zeros(2, 3, dtype=torch.int32),
        torch.zeros(8, 5),
        torch.full((2, 3), -777, dtype=torch.int32),
    )
    with pytest.raises(KernelArgumentError, match=r"x shape expected \(6, 5\) \(\(B \* W, V\) with B=2, W=3, V=5\)"):
        kernel(base, x, tokens)  # W = 3 from base, 4 from x
    with pytest.raises(KernelArgumentError, match=r"tokens shape expected \(2, 4\) .* W=4, V=5\), got \(2, 3\)"):
        kernel(torch.zeros(2, 4, dtype=torch.int32), x, tokens)
    with pytest.raises(KernelArgumentError, match="the width W .* must be at least 2, got 1"):
        kernel(torch.zeros(2, 1, dtype=torch.int32), torch.zeros(2, 5), torch.zeros(2, 1, dtype=torch.int32))
    assert (tokens == -777).all()
    assert width_of(ARGS, [base, x, tokens]) == 3 and width_of(ARGS[1:2], [x]) is None


def test_the_manifest_passes_w_only_where_a_bare_axis_gives_it(folder):
    record = json.loads((folder / "manifest.json").read_text())["variants"][0]
    assert load_manifest(folder).variants[0].fixed_width is None
    without = dict(record, args=[dict(a, shape="(B, 4)") if a["shape"] == "(B, W)" else a for a in record["args"]])
    with pytest.raises(ManifestError, match="passes W, but no argument has an axis of extent W"):
        _parsed(folder, [without])
    fixed = dict(without, params=[p for p in PARAMS if p != "W"])  # no W parameter, but W in a shape
    with pytest.raises(ManifestError, match="'width' is 0 .* no argument has an axis of extent W"):
        _parsed(folder, [fixed])
    assert _parsed(folder, [dict(fixed, width=4)]).variants[0].fixed_width == 4


def _parsed(folder, variants):
    data = json.loads((folder / "manifest.json").read_text())
    return parse_manifest(dict(data, variants=variants), folder / "manifest.json")


def test_the_cuda_launcher_packs_w_and_evaluates_the_grid_with_it(folder, monkeypatch):
    entry = load_manifest(folder).variants[0]
    cuda = dataclasses.replace(entry, target="cuda", arch="sm_90")
    launcher, launches = fake_cuda_launcher(monkeypatch, cuda, folder, (3, 4, 5))
    assert loaders.param_slots(cuda) == (0, 2, 1, None, loaders.VOCAB, loaders.WIDTH)
    for batch, width, vocab in ((3, 4, 37), (3, 2, 37), (2, 16, 5)):
        tokens = torch.zeros(batch, width, dtype=torch.int32)
        launcher.launch([tokens, torch.zeros(batch * width, vocab), tokens], batch)
        assert launches[-1] == (batch * width, 128, [batch, vocab, width])
    assert sorted(launcher._grids) == [(2, 0, 0, 16), (3, 0, 0, 2), (3, 0, 0, 4)]  # the grid names W, not V


# The vocabulary pass: one variant of each family for a build at two widths, run at both.


@pytest.fixture(scope="module")
def vocab_lib(tmp_path_factory):
    from specgen.driver import plan_and_build
    from specgen.specializations import Matrix

    out = tmp_path_factory.mktemp("width_free_vocab") / "kernels"
    matrix = Matrix(widths=(3, 4), block_table_widths=(8,), block_sizes=(16,), draft_dtypes=("int32",))
    summary = plan_and_build(
        matrix, ("c",), out, jobs=3, boundaries=SAMPLED_TAILS, families=VOCAB_FAMILIES, progress=None
    )
    assert not summary.failed and summary.built + summary.cached == len(VOCAB_FAMILIES), summary
    return load_library(out)


def _vocab_args(family: str, batch: int, width: int, vocab: int, chunks: int, gen: torch.Generator) -> dict:
    """The family's tensors at ``width``: random inputs, outputs filled with -7, the workspace's sums zero."""

    def rand(shape, low, high, dtype):
        return torch.randint(low, high, shape, generator=gen, dtype=dtype)

    inputs = {
        "draft_tokens": lambda s: rand(s, -1, vocab + 1, torch.int32),
        "draft_probs": lambda s: torch.rand(s, generator=gen),
        "temperature": lambda s: torch.tensor([0.0, 0.8, 1.3])[rand(s, 0, 3, torch.int64)],
        "top_k": lambda s: rand(s, 0, vocab + 2, torch.int32),
        "top_p": lambda s: torch.tensor([1.0, 0.9, 0.5])[rand(s, 0, 3, torch.int64)],
        "seed": lambda s: rand(s, -(2**62), 2**62, torch.int64),
        "seq_lens": lambda s: rand(s, 0, 5000, torch.int32),
        "sample_positions": lambda s: rand(s, 0, 10**6, torch.int64),
        "draft_dists": lambda s: torch.softmax(torch.randn(s, generator=gen) * 3, -1),
        "logit_tiles": lambda s: torch.full(s, -1, dtype=torch.int64),  # the oracle gives the odd rows theirs
    }
    out = {}
    for a in FAMILIES[family].args:
        shape = shape_of(a, batch, width, V=vocab, C=chunks)
        if a.name in inputs:
            out[a.name] = inputs[a.name](shape)
        elif not a.output:  # the logits
            out[a.name] = torch.randn(shape, generator=gen) * 4
        else:
            out[a.name] = torch.full(shape, 0 if a.name == "vocab_sums" else -7, dtype=getattr(torch, a.dtype))
    return out


@pytest.mark.slow
def test_a_build_at_two_widths_makes_one_variant_of_each_vocabulary_family(vocab_lib):
    assert vocab_lib.variants() == sorted(f"{f}__any" for f in VOCAB_FAMILIES)
    by_family = {e.family: e for e in vocab_lib.entries()}
    for family, entry in by_family.items():
        assert entry.width == ANY_WIDTH and entry.fixed_width is None
        width = ["W"] if FAMILIES[family].width_free else []
        assert list(entry.params[-3 - len(width) :]) == ["B", "C", "V", *width], entry.params
    assert by_family[TARGET_SAMPLE].boundaries == SAMPLED_TAILS[::-1]  # both tails, sorted
    assert by_family[DRAFT_SAMPLE].boundaries == ("verify-to-draft-sampled",)


@pytest.mark.slow
@pytest.mark.parametrize("family", VOCAB_FAMILIES)
def test_the_one_vocabulary_variant_equals_the_semantics_at_both_widths(vocab_lib, family):
    kernels = {w: vocab_lib.get(family, w) for w in (3, 4)}
    assert {k.key() for k in kernels.values()} == {f"{family}__any"}
    for width, kernel in kernels.items():
        gen = torch.Generator().manual_seed(width)
        for batch, vocab, chunks in ((1, 5, 1), (2, 1500, 2)):
            check_against_semantics(kernel, family, _vocab_args(family, batch, width, vocab, chunks, gen))


@pytest.mark.slow
def test_the_vocabulary_pass_refuses_a_width_its_tensors_disagree_on(vocab_lib):
    kernel = vocab_lib.get(TARGET_SAMPLE, 4)
    names = [a.name for a in FAMILIES[TARGET_SAMPLE].args]
    args = _vocab_args(TARGET_SAMPLE, 2, 4, 50, 1, torch.Generator().manual_seed(0))
    args["draft_tokens"] = args["draft_tokens"][:, :2].contiguous()  # drafts of a width-3 step
    with pytest.raises(KernelArgumentError, match=r"draft_tokens shape expected \(2, 3\) \(\(B, W - 1\) with B=2, W=4"):
        kernel(*(args[n] for n in names))
    assert (args["target_tokens"] == -7).all()  # nothing launched
    entry = vocab_lib.entry(f"{TARGET_SAMPLE}__any", "c")
    # W is the first bare W axis's, target_tokens': at 3, the width-3 drafts pass and draft_probs does not
    with pytest.raises(KernelArgumentError, match=r"draft_probs shape expected \(2, 2\) \(\(B, W - 1\) with B=2, W=3"):
        check_tensors(
            entry.args,
            [t if n != "target_tokens" else t[:, :3].contiguous() for n, t in args.items()],
            W=None,
            BT=None,
            NS=None,
            key=entry.key,
        )
