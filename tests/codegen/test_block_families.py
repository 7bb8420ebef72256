"""Block families: one thread block per row, argument shapes over the vocabulary ``V``.

``toy_row_argmax`` lives only here: per row of ``x[B, V]`` it writes the max (``out[B]``) and the
lowest column holding it (``arg[B]``).  Each of the block's ``THREADS`` lanes keeps the best of its
columns ``i, i + THREADS, ...`` in a shared buffer, then a tree halves the lanes.  The template
writes each phase once, ``{% filter lanes %}``: a ``for i in T.serial(THREADS):`` loop on c, every
thread as lane ``i`` followed by ``T.sync_threads()`` on cuda.  It is registered, rendered, lowered,
built into a folder the way ``specgen build`` writes one, and launched through ``KernelLibrary``,
which reads ``V`` from ``x`` and passes it to the kernel.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import shutil
from types import SimpleNamespace

import pytest
import torch
from oracles.toy_builds import build_c_folder, parsed, stamp_of

from specgen.codegen.build import _entry
from specgen.codegen.lower import compile_artifact, lower
from specgen.codegen.templates import add_template_dir, remove_template_dir, render_variant
from specgen.runtime import loaders
from specgen.runtime.cubin import cubin_kernels, entry_problems
from specgen.runtime.guards import KernelArgumentError, check_tensors, vocab_of
from specgen.runtime.library import KernelLibrary
from specgen.runtime.manifest import ManifestError, load_manifest
from specgen.runtime.semantics import SEMANTICS, register_semantics
from specgen.specializations.expr import eval_shape, vocab_axis
from specgen.specializations.families import FAMILIES, ArgSpec, Family, register, shape_of, unregister
from specgen.specializations.variants import VariantSpec

NAME, ROWS_NAME, W = "toy_row_argmax", "toy_row_first", 4
ARGS = (
    ArgSpec("x", "float32", "(B, V)"),
    ArgSpec("out", "float32", "(B,)", output=True),
    ArgSpec("arg", "int32", "(B,)", output=True),
)
TEMPLATE = """{% extends "_kernel.py.jinja" %}
{% block body %}
best = T.alloc_shared((THREADS,), "float32", scope="shared")
best_at = T.alloc_shared((THREADS,), "int32", scope="shared")
{% filter lanes %}
best[i] = -T.infinity("float32")
best_at[i] = V
for k in T.serial(T.ceildiv(V, THREADS)):
    c = k * THREADS + i
    if c < V:
        if x[r, c] > best[i]:
            best[i] = x[r, c]
            best_at[i] = c
{% endfilter %}
{% for k in range(1, 16) if threads // 2 ** k %}
{% set h = threads // 2 ** k %}
{% filter lanes %}
if i < {{ h }}:
    if best[i + {{ h }}] > best[i] or (best[i + {{ h }}] == best[i] and best_at[i + {{ h }}] < best_at[i]):
        best[i] = best[i + {{ h }}]
        best_at[i] = best_at[i + {{ h }}]
{% endfilter %}
{% endfor %}
{% filter lane0 %}
out[r] = best[0]
arg[r] = best_at[0]
{% endfilter %}
{% endblock %}
"""
# A block per verification row r = b * W + j: the launch binds b and j of r too.
ROWS_TEMPLATE = """{% extends "_kernel.py.jinja" %}
{% block body %}
{% filter lane0 %}
out[r] = x[r, V - 1] + T.float32(b * 100 + j)
{% endfilter %}
{% endblock %}
"""


def toy_row_argmax(x, out, arg) -> None:
    best, at = x.max(dim=1)  # the first of equal maxima, as the kernel's lowest column
    out.copy_(best)
    arg.copy_(at.to(torch.int32))


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    folder = tmp_path_factory.mktemp("block_templates")
    (folder / f"{NAME}.py.jinja").write_text(TEMPLATE, encoding="utf-8")
    (folder / f"{ROWS_NAME}.py.jinja").write_text(ROWS_TEMPLATE, encoding="utf-8")
    family = register(Family(NAME, ("W",), ARGS, threads_per="block", rows="B"))
    row_args = (ArgSpec("x", "float32", "(B * W, V)"), ArgSpec("out", "float32", "(B * W,)", output=True))
    register(Family(ROWS_NAME, ("W",), row_args, threads_per="block", rows="B * W"))
    add_template_dir(folder)
    register_semantics(toy_row_argmax)
    try:
        yield family
    finally:
        SEMANTICS.pop(NAME, None)
        remove_template_dir(folder)
        unregister(ROWS_NAME)
        unregister(NAME)


def test_a_block_family_names_its_rows_and_reads_v_from_a_bare_axis(toy):
    assert toy.uses_vocab and not FAMILIES["greedy_prefix_verify"].uses_vocab and toy.rows == "B"
    assert shape_of(ARGS[0], 3, W, V=37) == (3, 37) and eval_shape("(W - 1, B, V)", B=2, W=4, V=5) == (3, 2, 5)
    assert [vocab_axis(s) for s in ("(B, V)", "(W - 1, B, V)", "V", "(B, V + 1)", "(B * W,)")] == [1, 2, 0, None, None]
    with pytest.raises(ValueError, match="names its rows"):
        Family("t_block", ("W",), ARGS, threads_per="block")
    with pytest.raises(ValueError, match="names its rows"):
        Family("t_block", ("W",), ARGS, rows="B")
    # a block family may read W from the tensors (width-free) where an argument has a bare W axis
    with pytest.raises(ValueError, match=r"no argument has an axis of extent W: .*\(or name W in the key\)"):
        Family("t_block", ("BS",), ARGS, threads_per="block", rows="B * W")
    assert Family("t_block", (), (*ARGS, ArgSpec("w", "int32", "(B, W)")), threads_per="block", rows="B * W").width_free
    with pytest.raises(ValueError, match="one thread per row .* needs W in the key"):
        Family("t_row", (), (ArgSpec("w", "int32", "(B, W)"),), threads_per="row")
    with pytest.raises(ValueError, match="not one of"):
        Family("t_block", ("W",), ARGS, threads_per="block", rows="B * S")
    with pytest.raises(ValueError, match="no argument has an axis of extent V"):
        Family("t_block", ("W",), (ArgSpec("x", "float32", "(B, V + 1)"),), threads_per="block", rows="B")
    with pytest.raises(ValueError, match="never a composite's member"):
        register(Family("t_block_chain", (), (), members=(NAME, "greedy_prefix_verify")))
    assert "t_block_chain" not in FAMILIES


def test_the_launch_is_a_block_per_row_with_lanes_bound_per_target(toy):
    spec = VariantSpec(NAME, W)
    c, cuda = render_variant(spec, "c"), render_variant(spec, "cuda")
    for text in (c, cuda):
        assert 'THREADS_PER = "block"\nROWS = "B"\n' in text and '    V = T.dynamic("V")\n' in text
        assert 'x: T.Tensor((B, V), "float32"),' in text and 'out: T.Tensor((B,), "float32"),' in text
        assert "        with T.Kernel(B, threads=THREADS) as bx:\n" in text and "if b < B" not in text
        assert "One block of THREADS threads per row r (rows = B), batch B and vocabulary V bound" in text
    assert "T.get_thread_binding" not in c and "T.sync_threads" not in c and "if i == 0" not in c
    assert c.count("            for i in T.serial(THREADS):\n") == 8  # the first pass and 7 halvings
    assert "            r = bx\n            best = T.alloc_shared" in c
    assert "            out[r] = best[0]\n" in c
    assert "            i = T.get_thread_binding()\n            r = bx\n" in cuda and "T.serial(THREADS)" not in cuda
    assert cuda.count("            T.sync_threads()\n") == 8
    assert "            if i == 0:\n                out[r] = best[0]\n" in cuda
    with pytest.raises(ValueError, match="not rendered for ascend"):
        render_variant(spec, "ascend")
    # the rest keep their launch and their text
    assert 'V = T.dynamic("V")' not in render_variant(VariantSpec("greedy_prefix_verify", W), "c")


def test_rows_over_b_times_w_bind_b_and_j(toy):
    text = render_variant(VariantSpec(ROWS_NAME, W), "c")
    assert "with T.Kernel(B * W, threads=THREADS) as bx:\n            r = bx\n" in text
    assert "            b = (r >> 2)\n            j = (r & 3)\n" in text and 'ROWS = "B * W"' in text
    low = lower(text, "c")
    assert low.grid == "B * W" and low.params[-2:] == ["B", "V"] and low.pointer_params == ["out", "x"]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_cuda_lowers_compiles_and_takes_int32_v(toy, tmp_path):
    spec = VariantSpec(NAME, W)
    low = lower(render_variant(spec, "cuda"), "cuda", "sm_90", symbol=spec.key)
    assert low.params == ["arg", "out", "x", "B", "V"] and low.grid == "B" and low.threads == 128
    assert "__syncthreads()" in low.source and "__shared__" in low.source and "blockIdx.x" in low.source
    cubin = tmp_path / "toy.cubin"
    compile_artifact(low, cubin)
    image = cubin.read_bytes()
    assert [size for _, size in cubin_kernels(image)[low.entry].params] == [8, 8, 8, 4, 4]
    stamp = {"artifact": "cuda/toy.cubin", "sha256": "0" * 64, **stamp_of(low)}
    entry = parsed(tmp_path, [_entry(spec, "cuda", stamp, set())]).variants[0]
    assert entry_problems(image, entry) == []
    assert "takes parameters of" in entry_problems(image, dataclasses.replace(entry, params=entry.params[:-1]))[0]


@pytest.fixture(scope="module")
def folder(toy, tmp_path_factory):
    """The toy built for c as ``specgen build`` builds a variant, and listed in a manifest."""
    out = tmp_path_factory.mktemp("block_build") / "kernels"
    out.mkdir()
    return build_c_folder(out, NAME, VariantSpec(NAME, W))


def test_the_manifest_records_the_rows_as_the_grid_and_v_in_the_shapes(folder):
    record = json.loads((folder / "manifest.json").read_text())["variants"][0]
    assert record["launch"] == {"threads": 128, "grid": "B"}
    assert [a["shape"] for a in record["args"]] == ["(B, V)", "(B,)", "(B,)"]
    assert record["params"] == ["arg", "out", "x", "B", "V"]
    entry = load_manifest(folder).variants[0]
    assert entry.grid == "B" and entry.args[0].shape == "(B, V)" and entry.params[-1] == "V"
    assert parsed(folder, [record]).variants[0] == entry  # what the build wrote reads back the same
    without = dict(record, args=[dict(a, shape="(B, 7)") if a["name"] == "x" else a for a in record["args"]])
    with pytest.raises(ManifestError, match="passes V, but no argument has an axis of extent V"):
        parsed(folder, [without])


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("vocab", [1, 37, 1024, 5000])
def test_the_c_kernel_equals_torch_through_the_library(folder, batch, vocab):
    kernel = KernelLibrary(folder).get(NAME, W)
    g = torch.Generator().manual_seed(vocab * 10 + batch)
    for x in (
        torch.randn(batch, vocab, generator=g),
        torch.randint(-3, 4, (batch, vocab), generator=g).float(),  # many equal maxima: the lowest column wins
        torch.full((batch, vocab), -1e30),
    ):
        got = torch.full((batch,), 7.0), torch.full((batch,), -777, dtype=torch.int32)
        want = torch.empty(batch), torch.empty(batch, dtype=torch.int32)
        kernel(x, *got)
        SEMANTICS[NAME](x, *want)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), (vocab, batch, got, want)


def test_a_wrong_v_or_shape_is_refused_before_a_launch(folder):
    kernel = KernelLibrary(folder).get(NAME, W)
    out, arg = torch.zeros(2), torch.zeros(2, dtype=torch.int32)
    with pytest.raises(KernelArgumentError, match="V .* must be at least 1, got 0"):
        kernel(torch.zeros(2, 0), out, arg)
    with pytest.raises(KernelArgumentError, match=r"x shape expected \(2, 0\) \(\(B, V\) with B=2, V=0\), got \(2,\)"):
        kernel(torch.zeros(2), out, arg)
    with pytest.raises(KernelArgumentError, match=r"out shape expected \(2,\)"):
        kernel(torch.zeros(2, 9), torch.zeros(3), arg)
    # B is dim 0 of the first tensor, V the first bare-V axis; every other shape must agree with both
    args = [ArgSpec(n, "float32", s) for n, s in (("t", "(B,)"), ("logits", "(B * W, V)"), ("p", "(W - 1, B, V)"))]
    good = [torch.zeros(2), torch.zeros(8, 5), torch.zeros(3, 2, 5)]
    assert vocab_of(args, good) == 5 and check_tensors(args, good, W=4, BT=None, NS=None, key="k") == 2
    with pytest.raises(KernelArgumentError, match=r"p shape expected \(3, 2, 5\) .*V=5\), got \(3, 2, 6\)"):
        check_tensors(args, [*good[:2], torch.zeros(3, 2, 6)], W=4, BT=None, NS=None, key="k")
    assert vocab_of([ArgSpec("x", "int32", "(B,)")], [torch.zeros(2)]) is None


def test_the_torch_op_of_a_block_family(folder):
    from specgen.runtime import ops

    op = ops._register(NAME)
    assert ops.schema(NAME) == "(Tensor x, Tensor(a1!) out, Tensor(a2!) arg, int width) -> ()"
    previous = ops.use_library(folder)
    try:
        x = torch.randn(3, 300, generator=torch.Generator().manual_seed(1))
        out, arg = torch.zeros(3), torch.zeros(3, dtype=torch.int32)
        op(x, out, arg, W)
        assert torch.equal(arg, x.argmax(dim=1).to(torch.int32)) and torch.equal(out, x.amax(dim=1))
    finally:
        ops.use_library(previous)


class _Driver:
    """The CUDA driver as the launcher uses it; records each launch's grid and int32 parameters."""

    CUresult = SimpleNamespace(CUDA_SUCCESS=0)

    def __init__(self):
        self.launches = []

    def cuInit(self, flags):
        return (0,)

    def cuCtxGetCurrent(self):
        return (0, 1)

    def cuModuleLoadData(self, image):
        return (0, "module")

    def cuModuleGetFunction(self, module, name):
        return (0, name.decode())

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        array = (ctypes.c_void_p * 5).from_address(params)
        self.launches.append((gx, bx, [ctypes.c_int32.from_address(array[i]).value for i in (3, 4)]))
        return (0,)


def test_the_cuda_launcher_packs_v_and_launches_a_block_per_row(folder, monkeypatch):
    entry = load_manifest(folder).variants[0]
    cuda = dataclasses.replace(entry, target="cuda", arch="sm_90")
    drv = _Driver()
    monkeypatch.setattr(loaders, "_driver", lambda: drv)
    monkeypatch.setattr(loaders, "entry_problems", lambda *a: [])  # the entry is checked against a cubin above
    monkeypatch.setattr(loaders, "_KERNELS", {entry.sha256: {}})
    monkeypatch.setattr(loaders, "_MODULES", {})
    fake = {"get_device_capability": lambda i=None: (9, 0), "current_device": lambda: 0, "init": lambda: None}
    fake |= {"current_stream": lambda i=None: SimpleNamespace(cuda_stream=5), "device": lambda i: _Null()}
    for name, fn in fake.items():
        monkeypatch.setattr(torch.cuda, name, fn)
    launcher = loaders.CudaLauncher(cuda, folder)
    assert loaders.param_slots(cuda) == (2, 1, 0, None, loaders.VOCAB)
    tensors = {}
    for batch, vocab in ((3, 37), (3, 5000), (1, 37), (3, 37)):
        args = tensors.setdefault((batch, vocab), [torch.zeros(batch, vocab), torch.zeros(batch), torch.zeros(batch)])
        launcher.launch(args, batch)
        assert drv.launches[-1] == (batch, 128, [batch, vocab])
    assert len(launcher._packed) == 3 and sorted(launcher._grids) == [(1, 0, 0, 0), (3, 0, 0, 0)]  # no V, C, W in it


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
