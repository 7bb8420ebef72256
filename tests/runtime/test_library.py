"""The kernel library over a hand-written build: calls, missing variants, the rendered package."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch

from specgen.runtime.library import UnknownFamily, VariantNotBuilt

W = 4
FAMILY = "spec_verify_token_update"


def reference(last, draft):
    return torch.cat([last[:, None], draft.to(torch.int32)], dim=1).reshape(-1)


def inputs(B, dtype=torch.int32, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    last = torch.randint(0, 1000, (B,), generator=g, dtype=torch.int32)
    draft = torch.randint(0, 1000, (B, W - 1), generator=g).to(dtype)
    return last.to(device), draft.to(device), torch.full((B * W,), -7, dtype=torch.int32, device=device)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("B", [1, 5, 300])
def test_c_variant_matches_reference(token_lib, dtype, B):
    last, draft, tokens = inputs(B, dtype)
    token_lib.get(FAMILY, W)(last, draft, tokens)
    assert torch.equal(tokens, reference(last, draft))


def test_empty_batch_launches_nothing(token_lib):
    last, draft, tokens = inputs(0)
    token_lib.get(FAMILY, W)(last, draft, tokens)
    assert token_lib._launchers == {}  # not even loaded


def test_missing_variant_names_key_and_command(token_lib):
    with pytest.raises(
        VariantNotBuilt,
        match=r"spec_verify_token_update__w7 is not built: run `specgen build --widths 7 "
        rf"--out {re.escape(str(token_lib.root))}`",
    ):
        token_lib.get(FAMILY, 7)
    assert issubclass(VariantNotBuilt, LookupError)
    with pytest.raises(VariantNotBuilt, match=r"--block-table-widths 64 --block-sizes 128"):
        token_lib.get("spec_verify_metadata_update", 4, block_table_width=64, block_size=128)
    with pytest.raises(VariantNotBuilt, match="--target cuda"):
        token_lib.get(FAMILY, W, target="cuda")
    with pytest.raises(UnknownFamily, match="known: context_kv_update"):
        token_lib.get("no_such_family", 4)
    assert token_lib.has(FAMILY, W) and token_lib.has(FAMILY, W, draft_dtype="int64") and not token_lib.has(FAMILY, 5)
    assert token_lib.variants() == [f"{FAMILY}__w4", f"{FAMILY}__w4_i64"]


def test_rendered_package_imports_and_runs(make_token_build, tmp_path):
    make_token_build(tmp_path, name="specgen_kernels_pkgtest")
    code = (
        "import torch, specgen_kernels_pkgtest as k; "
        "last = torch.arange(3, dtype=torch.int32); draft = torch.arange(9).reshape(3, 3); "
        "out = torch.empty(12, dtype=torch.int32); k.get('spec_verify_token_update', width=4)(last, draft, out); "
        "print(k.variants(), type(k.library()).__name__, out.tolist())"
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert "['spec_verify_token_update__w4', 'spec_verify_token_update__w4_i64'] KernelLibrary" in res.stdout
    assert "[0, 0, 1, 2, 1, 3, 4, 5, 2, 6, 7, 8]" in res.stdout


def test_runtime_does_not_import_tilelang():
    code = (
        "import sys, specgen.runtime, specgen.runtime.library, specgen.runtime.ops, "
        "specgen.runtime.loaders; "
        "assert 'tilelang' not in sys.modules, 'tilelang imported'; "
        "assert 'cuda.bindings' not in sys.modules, 'cuda.bindings imported eagerly'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_variant_built_for_another_contract_counts_as_not_built(make_token_build, tmp_path):
    """A folder built before a family's arguments changed: its variant is stale, not called with the wrong
    arguments; looking it up says so and how to build it again."""
    import json

    from specgen.runtime.library import load_library, stale_reason

    root = make_token_build(tmp_path, name="specgen_kernels_stale")
    path = root / "manifest.json"
    doc = json.loads(path.read_text())
    for v in doc["variants"]:
        if v["key"] == f"{FAMILY}__w4":
            dropped = v["args"].pop()  # the family had one argument fewer when this was built
            v["params"] = [n for n in v["params"] if n != dropped["name"]]
    path.write_text(json.dumps(doc))
    lib = load_library(root)
    assert list(lib.stale()) == [(f"{FAMILY}__w4", "c")]
    assert "built for another contract of spec_verify_token_update" in lib.stale()[(f"{FAMILY}__w4", "c")]
    assert stale_reason(next(e for e in lib.entries() if e.key == f"{FAMILY}__w4_i64")) is None
    assert not lib.has(FAMILY, W, draft_dtype="int32") and lib.has(FAMILY, W, draft_dtype="int64")
    assert lib.variants() == [f"{FAMILY}__w4_i64"]
    with pytest.raises(VariantNotBuilt, match=r"another contract of spec_verify_token_update .*specgen build"):
        lib.entry(f"{FAMILY}__w4", "c")


def test_the_bench_builds_again_what_a_changed_family_left_stale(make_planned_build, tmp_path):
    """``_built_for`` (what ``specgen bench`` checks before it runs): the plans' kernels and the companions the
    runtime launches beside them, each at today's contract of its family."""
    import json

    from specgen.cli.bench import _built_for
    from specgen.runtime.library import load_library
    from specgen.specializations.plan import DRAFT_TO_VERIFY, VERIFY_TO_DRAFT
    from specgen.specializations.variants import Layout

    both, layout = (DRAFT_TO_VERIFY, VERIFY_TO_DRAFT), Layout(W, 8, 16)
    companions = ("spec_verify_guard_check", "spec_batch_row_remap")
    root = make_planned_build(tmp_path / "whole", extra=companions)
    assert _built_for(load_library(root), layout, "c", both)
    assert not _built_for(
        load_library(make_planned_build(tmp_path / "no_guard", extra=companions[1:])), layout, "c", both
    )
    doc = json.loads((root / "manifest.json").read_text())
    guard = next(v for v in doc["variants"] if v["family"] == "spec_verify_guard_check")
    dropped = guard["args"].pop()  # the check as built before it took the flag
    guard["params"].remove(dropped["name"])
    (root / "manifest.json").write_text(json.dumps(doc))
    lib = load_library(root)
    assert [k for k, _ in lib.stale()] == [guard["key"]] and not _built_for(lib, layout, "c", both)
