"""Build folders and manifest records for the toy families that tests register (``test_block_families``,
``test_block_chunks``, ``test_width_free``): one variant, built for c the way ``specgen build`` builds it
(its workers' jobs, run in the test's process: a worker process would not know a family a test registered)."""

from __future__ import annotations

import json
from pathlib import Path

from specgen.codegen.batch import compile_job, lower_job
from specgen.codegen.build import SCHEMA_VERSION, _entry
from specgen.codegen.toolchain import toolchain
from specgen.runtime.manifest import parse_manifest
from specgen.specializations.variants import VariantSpec


def stamp_of(low) -> dict:
    """A lowering's part of a manifest record."""
    return {"entry": low.entry, "params": low.params, "threads": low.threads, "grid": low.grid, "arch": low.arch}


def parsed(root: Path, variants: list):
    """``variants`` (manifest records) read back as a manifest in ``root``."""
    manifest = {"schema_version": SCHEMA_VERSION, "specgen_version": "0", "variants": variants, "plans": {}}
    return parse_manifest(json.loads(json.dumps(manifest)), root / "manifest.json")


def build_c_folder(out: Path, family: str, spec: VariantSpec) -> Path:
    """``out`` holding ``spec`` built for c and its manifest (boundary ``sampling``)."""
    job = {"spec": spec, "target": "c", "tool": toolchain("c", None), "key": spec.key}
    member = dict(job, **lower_job(job))
    made = compile_job(
        {"out": str(out), "stage": str(out / ".stage"), "target": "c", "family": family, "members": [member]}
    )
    assert not made["failed"]
    variants = [_entry(spec, "c", made["stamps"][spec.key], {"sampling"})]
    manifest = {"schema_version": SCHEMA_VERSION, "specgen_version": "0", "targets": ["c"], "variants": variants}
    (out / "manifest.json").write_text(json.dumps(manifest | {"plans": {}}, sort_keys=True, indent=1))
    return out


def fake_cuda_launcher(monkeypatch, entry, folder, scalars: tuple[int, ...]):
    """A ``CudaLauncher`` of ``entry`` (a cuda record; its cubin's parameters are checked elsewhere) on a fake
    driver and a fake ``torch.cuda``, and the launches it makes: ``(blocks, threads, [the int32 parameters at
    positions scalars])`` each."""
    import contextlib
    import ctypes
    from types import SimpleNamespace

    import torch

    from specgen.runtime import loaders

    launches = []

    def launch(fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        array = (ctypes.c_void_p * len(entry.params)).from_address(params)
        launches.append((gx, bx, [ctypes.c_int32.from_address(array[k]).value for k in scalars]))
        return (0,)

    drv = SimpleNamespace(CUresult=SimpleNamespace(CUDA_SUCCESS=0), cuLaunchKernel=launch, cuInit=lambda f: (0,))
    drv.cuCtxGetCurrent, drv.cuModuleLoadData = lambda: (0, 1), lambda image: (0, "module")
    drv.cuModuleGetFunction = lambda module, name: (0, name.decode())
    drv.cuOccupancyMaxActiveBlocksPerMultiprocessor = lambda fn, threads, smem: (0, 2)  # two blocks per SM
    monkeypatch.setattr(loaders, "_driver", lambda: drv)
    monkeypatch.setattr(loaders, "entry_problems", lambda *a: [])
    monkeypatch.setattr(loaders, "_KERNELS", {entry.sha256: {}})
    monkeypatch.setattr(loaders, "_MODULES", {})
    fake = {"get_device_capability": lambda i=None: (9, 0), "current_device": lambda: 0, "init": lambda: None}
    fake |= {"get_device_properties": lambda i=None: SimpleNamespace(multi_processor_count=8)}  # 16 resident
    fake |= {"current_stream": lambda i=None: SimpleNamespace(cuda_stream=5), "device": contextlib.nullcontext}
    for name, fn in fake.items():
        monkeypatch.setattr(torch.cuda, name, fn)
    return loaders.CudaLauncher(entry, folder), launches
