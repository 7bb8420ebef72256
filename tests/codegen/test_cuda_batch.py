"""The cuda build without a GPU: variants sharing a cubin, their entries, and the launcher's side of the ABI.

The build compiles a family's cuda variants into one cubin.  What can go
wrong there short of running a kernel is checked here: the manifest's
entries against the cubin's symbols and ``.nv.info`` parameter records, and
the launcher (with a recording stand-in for the CUDA driver) loading a shared
cubin once and packing each entry's arguments in the order and sizes the
cubin declares.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import hashlib
import re
import shutil
from types import SimpleNamespace

import pytest
import torch

from specgen.driver import plan_and_build
from specgen.runtime import loaders
from specgen.runtime.cubin import cubin_kernels, entry_problems
from specgen.runtime.manifest import ArtifactError, folder_problems, load_manifest
from specgen.specializations import Matrix
from specgen.specializations.families import FAMILIES as FAMILY_RECORDS

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")]
FAMILIES = ("spec_verify_token_update", "prepare_next_draft")


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    out = tmp_path_factory.mktemp("cuda_batch") / "kernels"
    matrix = Matrix(widths=(4, 5), block_table_widths=(8,), block_sizes=(16,), draft_dtypes=("int32",))
    summary = plan_and_build(matrix, ("cuda",), out, arch="sm_90", jobs=2, families=FAMILIES, progress=None)
    assert (summary.built, summary.compiler_runs, summary.failed) == (4, 2, [])
    return load_manifest(out)


def _by_artifact(manifest):
    groups = {}
    for v in manifest.variants:
        groups.setdefault(v.artifact, []).append(v)
    return groups


def test_a_family_shares_one_cubin_that_holds_exactly_its_entries(manifest):
    groups = _by_artifact(manifest)
    assert sorted({v.family for v in vs}.pop() for vs in groups.values()) == sorted(FAMILIES)
    for artifact, variants in groups.items():
        family = variants[0].family
        assert re.fullmatch(rf"cuda/{family}-[0-9a-f]{{16}}\.cubin", artifact)
        image = (manifest.root / artifact).read_bytes()
        assert {v.sha256 for v in variants} == {hashlib.sha256(image).hexdigest()}
        assert {v.entry for v in variants} == {f"{v.key}_kernel" for v in variants} == set(cubin_kernels(image))
    assert folder_problems(manifest) == []


def test_each_entry_takes_the_pointers_and_int32_batch_the_launcher_packs(manifest):
    for v in manifest.variants:
        image = (manifest.root / v.artifact).read_bytes()
        kernel = cubin_kernels(image)[v.entry]
        sizes = [size for _, size in kernel.params]
        assert sizes == [4 if p == "B" else 8 for p in v.params] and v.params[-1] == "B", v.key
        offsets = [offset for offset, _ in kernel.params]
        assert offsets == sorted(offsets) and all(o % s == 0 for o, s in zip(offsets, sizes))
        assert kernel.max_threads == (v.threads, 1, 1)
        assert entry_problems(image, v) == []


def test_an_entry_that_disagrees_with_its_cubin_is_refused_before_the_driver(manifest):
    v = manifest.variants[0]
    image = (manifest.root / v.artifact).read_bytes()
    other = dataclasses.replace(v, entry="missing_kernel")
    assert entry_problems(image, other)[0].startswith("has no kernel 'missing_kernel' (it holds ")
    swapped = dataclasses.replace(v, params=("B", *v.params[:-1]))
    assert "takes parameters of [8, " in entry_problems(image, swapped)[0]
    wide = dataclasses.replace(v, threads=2 * v.threads)
    assert entry_problems(image, wide) == [
        f"{v.entry} is bounded to {v.threads} threads a block; the manifest launches {2 * v.threads}"
    ]
    with pytest.raises(ArtifactError, match=rf"{re.escape(v.artifact)}: has no kernel 'missing_kernel'"):
        loaders.CudaLauncher(other, manifest.root)


class _Driver:
    """Records what the launcher asks of the CUDA driver; decodes each launch's parameter buffer."""

    CUresult = SimpleNamespace(CUDA_SUCCESS=0)

    def __init__(self, layouts):
        self.layouts, self.loads, self.functions, self.launches = layouts, [], [], []

    def cuInit(self, flags):
        return (0,)

    def cuCtxGetCurrent(self):
        return (0, 1)

    def cuCtxSetCurrent(self, ctx):
        return (0,)

    def cuModuleLoadData(self, image):
        self.loads.append(hashlib.sha256(image).hexdigest())
        return (0, len(self.loads))

    def cuModuleGetFunction(self, module, name):
        self.functions.append((module, name.decode()))
        return (0, name.decode())

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        slots = self.layouts[fn]
        array = (ctypes.c_void_p * len(slots)).from_address(params)
        values = [
            (ctypes.c_int32 if size == 4 else ctypes.c_uint64).from_address(array[i]).value
            for i, (_, size) in enumerate(slots)
        ]
        self.launches.append((fn, (gx, gy, gz), (bx, by, bz), shared, stream, values))
        return (0,)


def test_the_launcher_loads_a_shared_cubin_once_and_packs_arguments_as_the_cubin_declares(manifest, monkeypatch):
    layouts = {}
    for v in manifest.variants:
        layouts.update({k: kern.params for k, kern in cubin_kernels((manifest.root / v.artifact).read_bytes()).items()})
    drv = _Driver(layouts)
    monkeypatch.setattr(loaders, "_driver", lambda: drv)
    monkeypatch.setattr(loaders, "_MODULES", {})
    monkeypatch.setattr(loaders, "_KERNELS", {})
    for name, fn in {
        "get_device_capability": lambda i=None: (9, 0),
        "device": lambda i: contextlib.nullcontext(),
        "init": lambda: None,
        "current_device": lambda: 0,
        "current_stream": lambda i=None: SimpleNamespace(cuda_stream=77),
    }.items():
        monkeypatch.setattr(torch.cuda, name, fn)
    batch = 300
    for v in manifest.variants:
        tensors = [torch.zeros(4, dtype=torch.int32) for _ in v.args]
        loaders.CudaLauncher(v, manifest.root).launch(tensors, batch)
        index = {a.name: i for i, a in enumerate(v.args)}
        want = [batch if p == "B" else tensors[index[p]].data_ptr() for p in v.params]
        rows = batch * v.width if FAMILY_RECORDS[v.family].per_row else batch  # a thread per row or per sequence
        grid = (rows + v.threads - 1) // v.threads
        assert drv.launches[-1] == (v.entry, (grid, 1, 1), (v.threads, 1, 1), 0, 77, want), v.key
    groups = _by_artifact(manifest)
    assert sorted(drv.loads) == sorted(vs[0].sha256 for vs in groups.values())  # one load per cubin
    module_of = dict((name, module) for module, name in drv.functions)
    for variants in groups.values():
        assert len({module_of[v.entry] for v in variants}) == 1
    assert sorted(module_of) == sorted(v.entry for v in manifest.variants)
