"""Fixtures of the runtime tests: a build folder written by hand, without TileLang.

It holds a C (and, on GPU machines, CUDA) kernel for ``spec_verify_token_update``
w4 (int32 and int64 drafts), compiled with gcc / nvcc, plus the manifest
``specgen build`` would write for it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from specgen.codegen.package import render_package_init
from specgen.runtime.library import load_library

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
CUDA_PARTS = dict(
    decl='extern "C" __global__ void', index="int b = blockIdx.x * blockDim.x + threadIdx.x;", loop="if (b < B)", ret=""
)


def _variant(key, dtype, target, artifact, blob, arch=None):
    return {
        "key": key,
        "family": FAMILY,
        "width": W,
        "block_table_width": None,
        "block_size": None,
        "draft_dtype": dtype,
        "num_splits": None,
        "target": target,
        "arch": arch,
        "artifact": artifact,
        "sha256": hashlib.sha256(blob).hexdigest(),
        "entry": f"{key}_kernel",
        "params": PARAMS,
        "args": [
            {"name": "last_tokens", "dtype": "int32", "shape": "(B,)", "output": False},
            {"name": "draft_tokens", "dtype": dtype, "shape": "(B, W - 1)", "output": False},
            {"name": "tokens", "dtype": "int32", "shape": "(B * W,)", "output": True},
        ],
        "launch": {"threads": 128, "grid": "(B + 127) // 128"},
        "guards": [{"expr": "batch >= 0", "why": "B is a size"}],
        "boundaries": ["draft-to-verify"],
    }


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


def _make_build(root: Path, name: str = "specgen_kernels", targets=("c",)) -> Path:
    """A build folder with token-update w4 (int32 and int64 drafts) for ``targets``."""
    out = root / name
    variants = []
    for target in targets:
        (out / target).mkdir(parents=True, exist_ok=True)
        for dtype, key in (("int32", f"{FAMILY}__w4"), ("int64", f"{FAMILY}__w4_i64")):
            rel = f"{target}/{key}.{'so' if target == 'c' else 'cubin'}"
            blob = _compile(out / rel, target, key, dtype)
            variants.append(_variant(key, dtype, target, rel, blob, "sm_90" if target == "cuda" else None))
    manifest = {
        "schema_version": 2,
        "specgen_version": "0.1.0",
        "tilelang_version": "0.1.15",
        "targets": list(targets),
        "variants": variants,
        "plans": {},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    (out / "__init__.py").write_text(render_package_init(manifest))
    return out


@pytest.fixture(scope="session")
def make_token_build():
    """``make(root, name="specgen_kernels", targets=("c",)) -> Path``: a new hand-written build folder."""
    return _make_build


@pytest.fixture(scope="session")
def token_build(tmp_path_factory):
    """One hand-written build folder (target c) shared by the runtime tests."""
    return _make_build(tmp_path_factory.mktemp("token_build"))


@pytest.fixture
def token_lib(token_build):
    return load_library(token_build)


def _planned_manifest(
    root: Path, width: int = 4, bt: int = 8, bs: int = 16, missing: tuple[str, ...] = (), extra: tuple[str, ...] = ()
) -> Path:
    """A manifest with structured plans of both verify boundaries at one layout and their variants.

    The artifacts are never loaded (resolving a plan does not launch), so they
    are placeholders; families in ``missing`` have no variant, families in
    ``extra`` (e.g. a composite's members) have one that no plan names.
    """
    from specgen.specializations.families import FAMILIES
    from specgen.specializations.plan import DRAFT_TO_VERIFY, VERIFY_TO_DRAFT, Plan, PlanStep
    from specgen.specializations.variants import Layout, VariantSpec

    layout = Layout(width, bt, bs)
    head, greedy, prepare = (
        VariantSpec.of(f, layout) for f in ("spec_verify_head_update", "greedy_prefix_verify", "prepare_next_draft")
    )
    plans = [
        Plan(DRAFT_TO_VERIFY, layout, (PlanStep.kernel(head), PlanStep.forward())),
        Plan(
            VERIFY_TO_DRAFT,
            layout,
            (
                PlanStep("copy", "d2h_tokens"),
                PlanStep.forward(),
                PlanStep.kernel(greedy),
                PlanStep("other", "mark"),
                PlanStep.kernel(prepare),
                PlanStep("copy", "d2h_accepted"),
            ),
        ),
    ]
    variants = []
    for v in (head, greedy, prepare, *(VariantSpec.of(f, layout) for f in extra)):
        if v.family in missing:
            continue
        args = [
            {"name": a.name, "dtype": "int32" if a.dtype == "draft" else a.dtype, "shape": a.shape, "output": a.output}
            for a in FAMILIES[v.family].args
        ]
        variants.append(
            {
                "key": v.key,
                "family": v.family,
                "width": v.width,
                "block_table_width": v.block_table_width,
                "block_size": v.block_size,
                "draft_dtype": "int32",
                "num_splits": v.num_splits,
                "target": "c",
                "arch": None,
                "artifact": f"c/{v.key}.so",
                "sha256": hashlib.sha256(b"").hexdigest(),
                "entry": f"{v.key}_kernel",
                "params": [a["name"] for a in args] + ["B"],
                "args": args,
                "guards": [{"expr": f"max_seq_len + {width} <= {bt * bs}", "why": "S + W <= BT * BS"}],
            }
        )
    manifest = {
        "schema_version": 2,
        "specgen_version": "0.1.0",
        "targets": ["c"],
        "variants": variants,
        "plans": {p.boundary: {p.layout.key: p.as_dict()} for p in plans},
    }
    root.mkdir(parents=True, exist_ok=True)
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return root


@pytest.fixture(scope="session")
def make_planned_build():
    """``make(root, width=4, bt=8, bs=16, missing=(), extra=()) -> Path``: a build folder of plans and unloaded
    variants."""
    return _planned_manifest
