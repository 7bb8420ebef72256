"""Block families over ``C``, the blocks (chunks) that share a row: a run-time dimension read like ``V``.

``toy_row_chunks`` lives only here (it follows ``test_block_families.py``'s ``toy_row_argmax``): chunk
``ch`` of row ``r`` of ``x[B, V]`` sums its share of the row, the columns ``ch * L .. (ch + 1) * L - 1``
with ``L = ceil(V / C)``, into ``parts[r, ch, 0]`` and writes its ``ch`` into ``parts[r, ch, 1]``;
``out[r]`` is the ``C`` the kernel saw.  ``C`` is read from ``parts``.  On cuda each chunk is a block of
its own (the grid is the rows times ``C``, ``r = bx // C``, ``ch = bx % C``); on c one block per row
walks its chunks, ``{% filter chunks %}``: ``for ch in T.serial(C):`` around the template's phases.
"""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
import torch
from oracles.toy_builds import build_c_folder, fake_cuda_launcher, parsed, stamp_of

from specgen.codegen.build import _entry
from specgen.codegen.lower import compile_artifact, lower
from specgen.codegen.templates import add_template_dir, remove_template_dir, render_variant
from specgen.runtime import loaders
from specgen.runtime.cubin import cubin_kernels, entry_problems
from specgen.runtime.guards import KernelArgumentError, check_tensors, chunks_of
from specgen.runtime.library import KernelLibrary
from specgen.runtime.manifest import ManifestError, load_manifest
from specgen.specializations.expr import bare_axis, eval_shape, vocab_axis
from specgen.specializations.families import FAMILIES, ArgSpec, Family, register, unregister
from specgen.specializations.variants import VariantSpec

NAME, ROWS_NAME, W = "toy_row_chunks", "toy_row_chunks_w", 4
ARGS = (
    ArgSpec("x", "float32", "(B, V)"),
    ArgSpec("parts", "int64", "(B, C, 2)", output=True),
    ArgSpec("out", "int64", "(B,)", output=True),
)
PARAMS = ["out", "parts", "x", "B", "C", "V"]  # TileLang's order: the pointers, then the scalars, by name
TEMPLATE = """{% extends "_kernel.py.jinja" %}
{% block body %}
acc = T.alloc_shared((THREADS,), "int64", scope="shared")
{% filter chunks %}
{% filter lanes %}
acc[i] = T.int64(0)
for k in T.serial(T.ceildiv(T.ceildiv(V, C), THREADS)):
    c = ch * T.ceildiv(V, C) + k * THREADS + i
    if c < T.min((ch + 1) * T.ceildiv(V, C), V):
        acc[i] = acc[i] + T.Cast("int64", x[r, c])
{% endfilter %}
{% filter lane0 %}
parts[r, ch, 0] = T.int64(0)
for k in T.serial(THREADS):
    parts[r, ch, 0] = parts[r, ch, 0] + acc[k]
parts[r, ch, 1] = T.Cast("int64", ch)
if ch == 0:
    out[r] = T.Cast("int64", C)
{% endfilter %}
{% endfilter %}
{% endblock %}
"""
# A chunked block per verification row r = b * W + j (rendered only): the launch binds b and j of r too.
ROWS_TEMPLATE = """{% extends "_kernel.py.jinja" %}
{% block body %}
{% filter lane0 %}
parts[r, ch] = T.Cast("int64", b * 100 + j)
{% endfilter %}
{% endblock %}
"""


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    folder = tmp_path_factory.mktemp("chunk_templates")
    (folder / f"{NAME}.py.jinja").write_text(TEMPLATE, encoding="utf-8")
    (folder / f"{ROWS_NAME}.py.jinja").write_text(ROWS_TEMPLATE, encoding="utf-8")
    family = register(Family(NAME, ("W",), ARGS, threads_per="block", rows="B"))
    row_args = (ArgSpec("parts", "int64", "(B * W, C)", output=True),)
    register(Family(ROWS_NAME, ("W",), row_args, threads_per="block", rows="B * W"))
    add_template_dir(folder)
    try:
        yield family
    finally:
        remove_template_dir(folder)
        unregister(ROWS_NAME)
        unregister(NAME)


def test_c_is_a_block_familys_run_time_dimension_read_from_a_bare_axis(toy):
    assert toy.uses_chunks and toy.uses_vocab and not FAMILIES["greedy_prefix_verify"].uses_chunks
    assert eval_shape("(B, C, 2)", B=2, W=4, C=3) == (2, 3, 2) and eval_shape("(B * W, C)", B=2, W=4) == (8, 0)
    assert [bare_axis(s, "C") for s in ("(B, C, 2)", "C", "(B, C + 1)", "(B, V)")] == [1, 0, None, None]
    assert vocab_axis("(B, C, V)") == bare_axis("(B, C, V)", "V") == 2
    with pytest.raises(ValueError, match="no argument has an axis of extent C"):
        Family("t_chunks", ("W",), (*ARGS[:1], ArgSpec("p", "int64", "(B, C + 1)")), threads_per="block", rows="B")
    with pytest.raises(ValueError, match="only a block family's shapes name C"):
        Family("t_chunks", ("W",), (ArgSpec("p", "int64", "(B, C)"),))
    with pytest.raises(ValueError, match="never its rows"):
        Family("t_chunks", ("W",), ARGS, threads_per="block", rows="B * C")


def test_cuda_launches_rows_times_c_blocks_and_c_walks_the_chunks_in_a_row_block(toy):
    spec = VariantSpec(NAME, W)
    c, cuda = render_variant(spec, "c"), render_variant(spec, "cuda")
    for text in (c, cuda):
        assert '    V = T.dynamic("V")\n    C = T.dynamic("C")\n' in text
        assert 'parts: T.Tensor((B, C, 2), "int64"),' in text
        assert "batch B, vocabulary V and chunks per row C bound at run time" in text
    assert 'ROWS = "B"\n' in c and "        with T.Kernel(B, threads=THREADS) as bx:\n            r = bx\n" in c
    assert "            for ch in T.serial(C):\n                for i in T.serial(THREADS):\n" in c
    assert "One block of THREADS threads per row r (rows = B) walking its C chunks" in c and "bx % C" not in c
    assert 'ROWS = "(B) * C"\n' in cuda and "        with T.Kernel((B) * C, threads=THREADS) as bx:\n" in cuda
    assert (
        '            i = T.get_thread_binding()\n            rv = T.alloc_var("int32", init=bx // C)\n'
        '            cv = T.alloc_var("int32", init=bx % C)\n            r = T.max(T.min(rv, B - 1), 0)\n'
        "            ch = T.max(T.min(cv, C - 1), 0)\n" in cuda
    )
    assert "C blocks of THREADS threads per row r (rows = B), chunk ch = bx % C" in cuda
    assert "T.serial(C)" not in cuda and cuda.count("T.sync_threads()") == 1
    rows = render_variant(VariantSpec(ROWS_NAME, W), "cuda")
    assert 'ROWS = "(B * W) * C"\n' in rows and "with T.Kernel((B * W) * C, threads=THREADS) as bx:\n" in rows
    assert (
        "            r = T.max(T.min(rv, B * W - 1), 0)\n            ch = T.max(T.min(cv, C - 1), 0)\n"
        '            bv = T.alloc_var("int32", init=(r >> 2))\n            jv = T.alloc_var("int32", init=(r & 3))\n'
        "            b = T.max(T.min(bv, B - 1), 0)\n            j = T.max(T.min(jv, W - 1), 0)\n" in rows
    )
    rows_c = render_variant(VariantSpec(ROWS_NAME, W), "c")
    assert 'ROWS = "B * W"\n' in rows_c and "bx:\n            r = bx\n            b = (r >> 2)\n" in rows_c
    low = lower(c, "c")
    assert low.grid == "B" and low.params == PARAMS and low.pointer_params == PARAMS[:3]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_cuda_lowers_compiles_and_takes_int32_b_c_v(toy, tmp_path):
    spec = VariantSpec(NAME, W)
    low = lower(render_variant(spec, "cuda"), "cuda", "sm_90", symbol=spec.key)
    assert low.params == PARAMS and low.grid == "(B) * C" and "blockIdx.x) % C" in low.source
    cubin = tmp_path / "chunks.cubin"
    compile_artifact(low, cubin)
    image = cubin.read_bytes()
    assert [size for _, size in cubin_kernels(image)[low.entry].params] == [8, 8, 8, 4, 4, 4]
    stamp = {"artifact": "cuda/chunks.cubin", "sha256": "0" * 64, **stamp_of(low)}
    entry = parsed(tmp_path, [_entry(spec, "cuda", stamp, set())]).variants[0]
    assert entry.grid == "(B) * C" and entry.params == tuple(PARAMS) and entry_problems(image, entry) == []
    assert "takes parameters of" in entry_problems(image, dataclasses.replace(entry, params=entry.params[:-1]))[0]


@pytest.fixture(scope="module")
def folder(toy, tmp_path_factory):
    """The toy built for c as ``specgen build`` builds a variant, and listed in a manifest."""
    out = tmp_path_factory.mktemp("chunk_build") / "kernels"
    out.mkdir()
    return build_c_folder(out, NAME, VariantSpec(NAME, W))


def test_the_manifest_passes_c_and_refuses_c_without_a_bare_axis(folder):
    record = json.loads((folder / "manifest.json").read_text())["variants"][0]
    assert record["params"] == PARAMS and record["launch"] == {"threads": 128, "grid": "B"}
    assert load_manifest(folder).variants[0].params == tuple(PARAMS)
    without = dict(record, args=[dict(a, shape="(B, 3, 2)") if a["name"] == "parts" else a for a in record["args"]])
    with pytest.raises(ManifestError, match="passes C, but no argument has an axis of extent C"):
        parsed(folder, [without])


@pytest.mark.parametrize("vocab", [1, 37, 300])
@pytest.mark.parametrize("chunks", [1, 3, 400])  # 400: more chunks than tokens, the last ones empty
def test_the_c_kernel_sums_each_chunk_of_each_row(folder, vocab, chunks):
    kernel = KernelLibrary(folder).get(NAME, W)
    x = torch.randint(-3, 4, (2, vocab), generator=torch.Generator().manual_seed(vocab * 1000 + chunks)).float()
    parts, out = torch.full((2, chunks, 2), -777, dtype=torch.int64), torch.full((2,), -777, dtype=torch.int64)
    kernel(x, parts, out)
    share = -(-vocab // chunks)
    want = torch.stack([x[:, k * share : (k + 1) * share].long().sum(dim=1) for k in range(chunks)], dim=1)
    assert torch.equal(parts[:, :, 0], want), (vocab, chunks, parts, want)
    assert torch.equal(parts[:, :, 1], torch.arange(chunks).expand(2, chunks)) and out.tolist() == [chunks] * 2


def test_a_wrong_c_or_shape_is_refused_before_a_launch(folder):
    kernel = KernelLibrary(folder).get(NAME, W)
    x, out = torch.zeros(2, 5), torch.zeros(2, dtype=torch.int64)
    with pytest.raises(KernelArgumentError, match="the chunks per row C .* must be at least 1, got 0"):
        kernel(x, torch.zeros(2, 0, 2, dtype=torch.int64), out)
    with pytest.raises(
        KernelArgumentError, match=r"parts shape expected \(2, 3, 2\) \(\(B, C, 2\) with B=2, V=5, C=3\)"
    ):
        kernel(x, torch.zeros(2, 3, 3, dtype=torch.int64), out)
    with pytest.raises(KernelArgumentError, match=r"parts shape expected \(2, 0, 2\) .* C=0\), got \(2,\)"):
        kernel(x, torch.zeros(2, dtype=torch.int64), out)  # too few axes to read C from: 0
    # C is the first bare-C axis; every other shape naming C must agree with it
    args = [ArgSpec("p", "int64", "(B, C, 2)"), ArgSpec("q", "int64", "(C * W,)")]
    good = [torch.zeros(2, 3, 2, dtype=torch.int64), torch.zeros(12, dtype=torch.int64)]
    assert chunks_of(args, good) == 3 and check_tensors(args, good, W=4, BT=None, NS=None, key="k") == 2
    with pytest.raises(KernelArgumentError, match=r"q shape expected \(12,\) \(\(C \* W,\) with B=2, C=3\)"):
        check_tensors(args, [good[0], torch.zeros(8, dtype=torch.int64)], W=4, BT=None, NS=None, key="k")
    assert chunks_of([ArgSpec("x", "float32", "(B, V)")], [x]) is None


def test_the_cuda_launcher_packs_c_and_launches_rows_times_c_blocks(folder, monkeypatch):
    entry = load_manifest(folder).variants[0]
    cuda = dataclasses.replace(entry, target="cuda", arch="sm_90", grid="(B) * C")  # the cuda build's grid
    launcher, launches = fake_cuda_launcher(monkeypatch, cuda, folder, (3, 4, 5))
    assert loaders.param_slots(cuda) == (2, 1, 0, None, loaders.CHUNKS, loaders.VOCAB)
    for batch, chunks, vocab in ((3, 4, 37), (3, 1, 37), (2, 4, 5000), (3, 4, 5000)):
        tensors = [torch.zeros(batch, vocab), torch.zeros(batch, chunks, 2, dtype=torch.int64), torch.zeros(batch)]
        launcher.launch(tensors, batch)
        assert launches[-1] == (batch * chunks, 128, [batch, chunks, vocab])
    assert sorted(launcher._grids) == [(2, 0, 4, 0), (3, 0, 1, 0), (3, 0, 4, 0)]  # the grid names C, not V or W


def test_the_cuda_launcher_refuses_more_chunks_than_the_device_holds_at_once(folder, monkeypatch):
    """A row's blocks wait for each other and CUDA does not promise to start blocks in order, so a grid of
    ``C > 1`` blocks per row may not exceed the resident blocks (here 2 per SM x 8 SMs); with ``C = 1`` nothing
    waits and any number of rows is fine; the check runs once per grid."""
    entry = load_manifest(folder).variants[0]
    cuda = dataclasses.replace(entry, target="cuda", arch="sm_90", grid="(B) * C")
    launcher, launches = fake_cuda_launcher(monkeypatch, cuda, folder, (3, 4, 5))

    def tensors(rows, chunks):
        return [torch.zeros(rows, 37), torch.zeros(rows, chunks, 2, dtype=torch.int64), torch.zeros(rows)]

    launcher.launch(tensors(2, 8), 2)  # 16 blocks, all resident together
    launcher.launch(tensors(40, 1), 40)  # one block per row: nothing waits
    assert [n for n, *_ in launches] == [16, 40]
    for rows, chunks in ((1, 17), (3, 6)):
        with pytest.raises(ValueError, match=rf"{rows * chunks} blocks \({rows} rows x C = {chunks}\) .* holds 16"):
            launcher.launch(tensors(rows, chunks), rows)
        assert (rows, 0, chunks, 0) not in launcher._grids  # nothing launched, nothing cached
    assert len(launches) == 2
