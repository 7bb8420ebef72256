"""A cuda artifact is checked against the manifest's sha256 before anything reads it, on any machine.

The tampering here changes one byte of the kernel's code: the cubin stays a
readable ELF file whose symbol and parameter records still agree with the
manifest (``runtime/cubin.py`` finds nothing wrong), so only the hash can
tell.  The refusal comes before any device is touched, so it holds on a
machine without a GPU.
"""

from __future__ import annotations

import pytest

from specgen.runtime.cubin import _sections, entry_problems
from specgen.runtime.library import load_library
from specgen.runtime.loaders import CudaLauncher
from specgen.runtime.manifest import ArtifactError, folder_problems, load_manifest

KEY = "spec_verify_token_update__w4"


@pytest.fixture
def cuda_build(make_token_build, tmp_path):
    """A build folder of cuda artifacts only (cubins from nvcc for sm_90; skipped without nvcc)."""
    return make_token_build(tmp_path, targets=("cuda",))


def tamper_code(path, entry_symbol: str) -> None:
    """Flip one byte in the middle of the kernel's ``.text`` section."""
    image = bytearray(path.read_bytes())
    ((offset, size),) = [(off, n) for name, _, off, n, _ in _sections(bytes(image)) if name == f".text.{entry_symbol}"]
    assert size > 0
    image[offset + size // 2] ^= 0xFF
    path.write_bytes(bytes(image))


def test_an_untouched_cubin_is_accepted_without_a_device(cuda_build):
    lib = load_library(cuda_build)
    entry = lib.entry(KEY, "cuda")
    assert isinstance(lib.launcher(entry), CudaLauncher)  # verified and checked; nothing loaded on a device yet
    assert folder_problems(lib.manifest) == []


def test_a_tampered_cubin_is_refused_by_its_hash(cuda_build):
    lib = load_library(cuda_build)
    entry = lib.entry(KEY, "cuda")
    cubin = cuda_build / entry.artifact
    tamper_code(cubin, entry.entry)
    assert entry_problems(cubin.read_bytes(), entry) == []  # structurally the same kernel
    with pytest.raises(ArtifactError, match=rf"{cubin.name}: sha256 [0-9a-f]+ does not match the manifest's"):
        lib.launcher(entry)
    with pytest.raises(ArtifactError, match="does not match the manifest's"):
        CudaLauncher(entry, cuda_build)
    problems = folder_problems(load_manifest(cuda_build))
    assert len(problems) == 1 and problems[0].startswith(f"{entry.artifact}: sha256 "), problems
