"""Runtime loaders on a hand-written build: manifest, checks, package, ops, CUDA graphs.

The build folder is made here without TileLang: a C (and, on GPU machines,
CUDA) kernel for ``spec_verify_token_update`` w4 written by hand, compiled
with gcc / nvcc, plus the manifest ``specgen build`` would write for it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from specgen.runtime import guards as G
from specgen.codegen.package import render_package_init
from specgen.runtime.library import KernelLibrary, UnknownFamily, VariantNotBuilt, load_library
from specgen.runtime.manifest import ArtifactError, ManifestError, load_manifest

W = 4
FAMILY = "spec_verify_token_update"
PARAMS = ["draft_tokens", "last_tokens", "tokens", "B"]  # the code generator's (sorted) order
KERNEL = """
#include <stdint.h>
{decl} {entry}({ptr} *draft_tokens, const int32_t *last_tokens, int32_t *tokens, int32_t B) {{
  {index}
  {loop} {{
    tokens[b * {W}] = last_tokens[b];
    for (int j = 1; j < {W}; ++j) tokens[b * {W} + j] = (int32_t)draft_tokens[b * ({W} - 1) + j - 1];
  }}
  {ret}
}}
"""
C_PARTS = dict(decl="int32_t", index="", loop="for (int32_t b = 0; b < B; ++b)", ret="return 0;")
CUDA_PARTS = dict(decl='extern "C" __global__ void', index="int b = blockIdx.x * blockDim.x + threadIdx.x;",
                  loop="if (b < B)", ret="")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _variant(key, dtype, target, artifact, blob, arch=None):
    return {"key": key, "family": FAMILY, "width": W, "block_table_width": None, "block_size": None,
            "draft_dtype": dtype, "num_splits": None, "target": target, "arch": arch, "artifact": artifact,
            "sha256": hashlib.sha256(blob).hexdigest(), "entry": f"{key}_kernel", "params": PARAMS,
            "args": [{"name": "last_tokens", "dtype": "int32", "shape": "(B,)", "output": False},
                     {"name": "draft_tokens", "dtype": dtype, "shape": "(B, W - 1)", "output": False},
                     {"name": "tokens", "dtype": "int32", "shape": "(B * W,)", "output": True}],
            "launch": {"threads": 128, "grid": "(B + 127) // 128"},
            "guards": [{"expr": "batch >= 0", "why": "B is a size"}], "boundaries": ["draft-to-verify"]}


def _compile(out: Path, target: str, key: str, dtype: str) -> bytes:
    ctype = "int64_t" if dtype == "int64" else "int32_t"
    parts = C_PARTS if target == "c" else CUDA_PARTS
    src = out.with_suffix(".c" if target == "c" else ".cu")
    src.write_text(KERNEL.format(entry=f"{key}_kernel", ptr=f"const {ctype}", W=W, **parts))
    if target == "c":
        cmd = ["gcc", "-O2", "-shared", "-fPIC", "-o", str(out), str(src)]
    else:
        nvcc = shutil.which("nvcc") or "/usr/local/bin/nvcc"
        if not os.path.exists(nvcc):
            pytest.skip("no nvcc to build the test cubin")
        cmd = [nvcc, "-cubin", "-arch=sm_90", "-o", str(out), str(src)]
    subprocess.run(cmd, check=True, capture_output=True)
    return out.read_bytes()


def make_build(root: Path, name: str = "specgen_kernels", targets=("c",)) -> Path:
    """A build folder with token-update w4 (int32 and int64 drafts) for ``targets``."""
    out = root / name
    variants = []
    for target in targets:
        (out / target).mkdir(parents=True, exist_ok=True)
        for dtype, key in (("int32", f"{FAMILY}__w4"), ("int64", f"{FAMILY}__w4_i64")):
            rel = f"{target}/{key}.{'so' if target == 'c' else 'cubin'}"
            blob = _compile(out / rel, target, key, dtype)
            variants.append(_variant(key, dtype, target, rel, blob, "sm_90" if target == "cuda" else None))
    manifest = {"schema_version": 2, "specgen_version": "0.1.0", "tilelang_version": "0.1.15",
                "targets": list(targets), "variants": variants, "plans": {}}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    (out / "__init__.py").write_text(render_package_init(manifest))
    return out


def reference(last, draft):
    return torch.cat([last[:, None], draft.to(torch.int32)], dim=1).reshape(-1)


def inputs(B, dtype=torch.int32, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    last = torch.randint(0, 1000, (B,), generator=g, dtype=torch.int32)
    draft = torch.randint(0, 1000, (B, W - 1), generator=g).to(dtype)
    return last.to(device), draft.to(device), torch.full((B * W,), -7, dtype=torch.int32, device=device)


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return make_build(tmp_path_factory.mktemp("build"))


@pytest.fixture
def lib(build):
    return load_library(build)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("B", [1, 5, 300])
def test_c_variant_matches_reference(lib, dtype, B):
    last, draft, tokens = inputs(B, dtype)
    lib.get(FAMILY, W)(last, draft, tokens)
    assert torch.equal(tokens, reference(last, draft))


def test_empty_batch_launches_nothing(lib):
    last, draft, tokens = inputs(0)
    lib.get(FAMILY, W)(last, draft, tokens)
    assert lib._launchers == {}  # not even loaded


def test_tampered_artifact_refused(build, tmp_path):
    copy = shutil.copytree(build, tmp_path / "tampered")
    so = copy / "c" / f"{FAMILY}__w4.so"
    blob = bytearray(so.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    so.write_bytes(bytes(blob))
    with pytest.raises(ArtifactError, match=so.name):
        load_library(copy).get(FAMILY, W)(*inputs(3))


def _poisoned(B=4):
    last, draft, tokens = inputs(B)
    return last, draft, tokens


@pytest.mark.parametrize("case, match", [
    ("dtype", "last_tokens dtype expected int32, got int64"),
    ("shape", r"tokens shape expected \(16,\)"),
    ("draft_shape", r"draft_tokens shape expected \(4, 3\)"),
    ("noncontig", "draft_tokens must be contiguous"),
    ("count", "expected 3 tensors"),
    ("device", "device expected cpu"),
])
def test_bad_arguments_refused_before_launch(lib, case, match):
    last, draft, tokens = _poisoned()
    if case == "dtype":
        last = last.long()
    elif case == "shape":
        tokens = torch.full((15,), -7, dtype=torch.int32)
    elif case == "draft_shape":
        draft = torch.zeros(4, 4, dtype=torch.int32)
    elif case == "noncontig":
        draft = torch.zeros(W - 1, 4, dtype=torch.int32).t()
    elif case == "device":
        tokens = torch.full((16,), -7, dtype=torch.int32, device="meta")
    args = (last, draft) if case == "count" else (last, draft, tokens)
    with pytest.raises(G.KernelArgumentError, match=match):
        lib.get(FAMILY, W)(*args)
    if tokens.device.type == "cpu":
        assert bool((tokens == -7).all()), "a refused call must not write"


def test_missing_variant_names_key_and_command(lib):
    with pytest.raises(VariantNotBuilt, match=r"spec_verify_token_update__w7 is not built: run `specgen build --widths 7`"):
        lib.get(FAMILY, 7)
    assert issubclass(VariantNotBuilt, LookupError)
    with pytest.raises(VariantNotBuilt, match=r"--block-table-widths 64 --block-sizes 128"):
        lib.get("spec_verify_metadata_update", 4, block_table_width=64, block_size=128)
    with pytest.raises(VariantNotBuilt, match="--target cuda"):
        lib.get(FAMILY, W, target="cuda")
    with pytest.raises(UnknownFamily, match="known: context_kv_update"):
        lib.get("no_such_family", 4)
    assert lib.has(FAMILY, W) and lib.has(FAMILY, W, draft_dtype="int64") and not lib.has(FAMILY, 5)
    assert lib.variants() == [f"{FAMILY}__w4", f"{FAMILY}__w4_i64"]


def test_guards_evaluator():
    guards = [("max_seq_len + 4 <= 64 * 128", "S + W <= BT * BS"), ("min_seq_len >= 0 and not batch < 0", "sizes")]
    assert G.check_guards(guards, min_seq_len=0, max_seq_len=100, batch=3).ok
    bad = G.check_guards(guards, min_seq_len=-1, max_seq_len=9000, batch=3)
    assert not bad and bad.failed == guards
    assert G.safe_eval("(B * W + 1, (B + 127) // 128)", {"B": 300, "W": 4}, G.SHAPE_NAMES) == (1201, 3)
    for unsafe in ["__import__('os')", "max_seq_len.__class__", "open('x')", "[1][0]", "2 ** 99999",
                   "lambda: 1", "batch if batch else 1", "True", "'s'", "x + 1"]:
        with pytest.raises(G.UnsafeExpressionError):
            G.safe_eval(unsafe, {"batch": 1, "min_seq_len": 0, "max_seq_len": 1})


def test_manifest_errors_name_file_and_field(build, tmp_path):
    data = json.loads((build / "manifest.json").read_text())
    cases = [("schema_version", 1, "schema_version"), ("sha256", None, "'sha256'"),
             ("guards", [{"expr": "__import__('os')"}], "guards\\[0\\]: field 'expr'"),
             ("artifact", "../../etc/passwd", "'artifact'")]
    for field, value, match in cases:
        bad = json.loads(json.dumps(data))
        if field == "schema_version":
            bad[field] = value
        elif value is None:
            del bad["variants"][0][field]
        else:
            bad["variants"][0][field] = value
        path = tmp_path / f"{field}.json"
        path.write_text(json.dumps(bad))
        with pytest.raises(ManifestError, match=f"{path.name}.*{match}"):
            load_manifest(path)
    with pytest.raises(ManifestError, match="no manifest"):
        KernelLibrary(tmp_path / "nowhere")


def test_rendered_package_imports_and_runs(tmp_path):
    make_build(tmp_path, name="specgen_kernels_pkgtest")
    code = ("import torch, specgen_kernels_pkgtest as k; "
            "last = torch.arange(3, dtype=torch.int32); draft = torch.arange(9).reshape(3, 3); "
            "out = torch.empty(12, dtype=torch.int32); k.get('spec_verify_token_update', width=4)(last, draft, out); "
            "print(k.variants(), type(k.library()).__name__, out.tolist())")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert "['spec_verify_token_update__w4', 'spec_verify_token_update__w4_i64'] KernelLibrary" in res.stdout
    assert "[0, 0, 1, 2, 1, 3, 4, 5, 2, 6, 7, 8]" in res.stdout


def test_runtime_does_not_import_tilelang():
    code = ("import sys, specgen.runtime, specgen.runtime.library, specgen.runtime.ops, "
            "specgen.runtime.loaders; "
            "assert 'tilelang' not in sys.modules, 'tilelang imported'; "
            "assert 'cuda.bindings' not in sys.modules, 'cuda.bindings imported eagerly'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_custom_op_eager_and_compiled(build):
    import importlib

    from specgen.runtime import ops

    importlib.reload(ops)  # registration is idempotent
    previous = ops.use_library(build)
    try:
        op = torch.ops.specgen.spec_verify_token_update
        last, draft, tokens = inputs(6)
        op(last, draft, tokens, W)
        assert torch.equal(tokens, reference(last, draft))

        def step(last, draft, tokens):
            torch.ops.specgen.spec_verify_token_update(last, draft, tokens, W)
            return tokens + 1

        compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
        last, draft, tokens = inputs(6, seed=1)
        got = compiled(last, draft, tokens)
        assert torch.equal(tokens, reference(last, draft)) and torch.equal(got, tokens + 1)
    finally:
        ops.use_library(previous)


@pytest.mark.gpu
@needs_cuda
def test_cuda_cubin_launch_and_graph_replay(tmp_path):
    lib = load_library(make_build(tmp_path, targets=("c", "cuda")))
    fn = lib.get(FAMILY, W)
    for dtype in (torch.int32, torch.int64):
        last, draft, tokens = inputs(300, dtype, device="cuda")
        fn(last, draft, tokens)
        torch.cuda.synchronize()
        assert torch.equal(tokens, reference(last, draft))
    last, draft, tokens = inputs(64, device="cuda", seed=2)
    fn(last, draft, tokens)  # warm up: module loads outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(last, draft, tokens)
    for seed in (3, 4):
        new_last, new_draft, _ = inputs(64, device="cuda", seed=seed)
        last.copy_(new_last), draft.copy_(new_draft), tokens.fill_(-7)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(tokens, reference(last, draft))
    with pytest.raises(G.KernelArgumentError, match="device"):
        fn(last, draft.cpu(), tokens)


@pytest.mark.gpu
@needs_cuda
def test_cuda_custom_op_in_graph(tmp_path):
    from specgen.runtime import ops

    previous = ops.use_library(make_build(tmp_path, targets=("cuda",)))
    try:
        last, draft, tokens = inputs(33, torch.int64, device="cuda")
        torch.ops.specgen.spec_verify_token_update(last, draft, tokens, W)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            torch.ops.specgen.spec_verify_token_update(last, draft, tokens, W)
        draft.add_(5), tokens.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(tokens, reference(last, draft))
    finally:
        ops.use_library(previous)


def test_arch_fits_and_ascend_is_refused_honestly(build, tmp_path):
    from specgen.runtime.loaders import AscendLauncher, TargetUnavailableError, arch_fits
    from specgen.runtime.manifest import parse_manifest

    assert arch_fits("sm_90", (9, 0)) and not arch_fits("sm_90", (8, 0)) and not arch_fits("sm_90", (10, 0))
    assert arch_fits("sm_80", (8, 6)) and not arch_fits("sm_90a", (9, 1)) and not arch_fits("sm90", (9, 0))
    data = json.loads((build / "manifest.json").read_text())
    src = tmp_path / "ascend" / "k.cpp"
    src.parent.mkdir()
    src.write_text("// Ascend C\n")
    rec = {**data["variants"][0], "target": "ascend", "artifact": "ascend/k.cpp",
           "sha256": hashlib.sha256(src.read_bytes()).hexdigest()}
    entry = parse_manifest({**data, "variants": [rec]}, tmp_path / "manifest.json").variants[0]
    with pytest.raises(TargetUnavailableError, match="torch_npu|bisheng"):
        AscendLauncher(entry, tmp_path)
