"""The launchers: sha256 before loading, cubin launch and capture, honest refusals."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
import torch

from specgen.runtime import guards as G
from specgen.runtime.library import load_library
from specgen.runtime.manifest import ArtifactError

W = 4
FAMILY = "spec_verify_token_update"
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def reference(last, draft):
    return torch.cat([last[:, None], draft.to(torch.int32)], dim=1).reshape(-1)


def inputs(B, dtype=torch.int32, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    last = torch.randint(0, 1000, (B,), generator=g, dtype=torch.int32)
    draft = torch.randint(0, 1000, (B, W - 1), generator=g).to(dtype)
    return last.to(device), draft.to(device), torch.full((B * W,), -7, dtype=torch.int32, device=device)


def test_tampered_artifact_refused(token_build, tmp_path):
    copy = shutil.copytree(token_build, tmp_path / "tampered")
    so = copy / "c" / f"{FAMILY}__w4.so"
    blob = bytearray(so.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    so.write_bytes(bytes(blob))
    with pytest.raises(ArtifactError, match=so.name):
        load_library(copy).get(FAMILY, W)(*inputs(3))


@pytest.mark.gpu
@needs_cuda
def test_cuda_cubin_launch_and_graph_replay(make_token_build, tmp_path):
    lib = load_library(make_token_build(tmp_path, targets=("c", "cuda")))
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


def test_arch_fits_and_ascend_is_refused_honestly(token_build, tmp_path):
    from specgen.runtime.loaders import AscendLauncher, TargetUnavailableError, arch_fits
    from specgen.runtime.manifest import parse_manifest

    assert arch_fits("sm_90", (9, 0)) and not arch_fits("sm_90", (8, 0)) and not arch_fits("sm_90", (10, 0))
    assert arch_fits("sm_80", (8, 6)) and not arch_fits("sm_90a", (9, 1)) and not arch_fits("sm90", (9, 0))
    data = json.loads((token_build / "manifest.json").read_text())
    src = tmp_path / "ascend" / "k.cpp"
    src.parent.mkdir()
    src.write_text("// Ascend C\n")
    rec = {
        **data["variants"][0],
        "target": "ascend",
        "artifact": "ascend/k.cpp",
        "sha256": hashlib.sha256(src.read_bytes()).hexdigest(),
    }
    entry = parse_manifest({**data, "variants": [rec]}, tmp_path / "manifest.json").variants[0]
    with pytest.raises(TargetUnavailableError, match="torch_npu|bisheng"):
        AscendLauncher(entry, tmp_path)


def test_the_hand_written_test_cubins_pass_the_launchers_entry_check(make_token_build, tmp_path):
    """What ``test_cuda_cubin_launch_and_graph_replay`` launches on a GPU is accepted by the check before it."""
    from specgen.runtime.cubin import entry_problems
    from specgen.runtime.manifest import load_manifest

    manifest = load_manifest(make_token_build(tmp_path, targets=("cuda",)))
    assert [v.key for v in manifest.variants] == [f"{FAMILY}__w4", f"{FAMILY}__w4_i64"]
    for v in manifest.variants:
        assert entry_problems((manifest.root / v.artifact).read_bytes(), v) == []
