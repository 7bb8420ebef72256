"""A built kernel folder as a library of callables, without TileLang.

    lib = load_library("build/specgen_kernels")
    update = lib.get("spec_verify_metadata_update", 4, block_table_width=64, block_size=128)
    update(seq_lens, block_table, positions, slot_mapping, kv_lens, query_start_loc)

``get`` returns a ``KernelCallable`` for a specialization; each call picks the
variant for the tensors' device (cpu -> ``c``, cuda -> ``cuda``, npu ->
``ascend``) and draft dtype, checks every tensor against the manifest
(``KernelArgumentError``, never a launch on a mismatch), loads the artifact on
first use (sha256 checked once) and launches.  A specialization that was not
built raises ``VariantNotBuilt`` with the ``specgen build`` command that
makes it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Sequence

from specgen.codegen.families import FAMILIES, variant_key
from specgen.runtime.guards import GuardResult, KernelArgumentError, check_guards, check_tensors
from specgen.runtime.manifest import (ArtifactError, KernelLaunchError, Manifest, ManifestError, VariantEntry,
                                      load_manifest, parse_manifest)

__all__ = ["ArtifactError", "KernelArgumentError", "KernelCallable", "KernelLaunchError", "KernelLibrary",
           "ManifestError", "UnknownFamily", "VariantNotBuilt", "build_command", "load_library",
           "render_package_init"]

TARGET_OF_DEVICE = {"cpu": "c", "cuda": "cuda", "npu": "ascend"}
DEVICE_OF_TARGET = {t: d for d, t in TARGET_OF_DEVICE.items()}
_LAUNCHERS = {"c": "CLauncher", "cuda": "CudaLauncher", "ascend": "AscendLauncher"}


class VariantNotBuilt(LookupError):
    """The requested specialization is not in the build; the message says how to build it."""


class UnknownFamily(LookupError):
    """The family name is not one of specgen's kernel families."""


def build_command(family: str, width: int, block_table_width: int | None = None, block_size: int | None = None,
                  target: str = "c", draft_dtype: str = "int32") -> str:
    """The ``specgen build`` command line that makes one specialization."""
    params = FAMILIES[family].key_params
    cmd = f"specgen build --widths {width}"
    if "BT" in params and block_table_width is not None:
        cmd += f" --block-table-widths {block_table_width}"
    if "BS" in params and block_size is not None:
        cmd += f" --block-sizes {block_size}"
    if target != "c":
        cmd += f" --target {target}"
    if FAMILIES[family].has_draft_dtype and draft_dtype != "int32":
        cmd += f" --draft-dtypes {draft_dtype}"
    return cmd


def _family(name: str):
    if name not in FAMILIES:
        raise UnknownFamily(f"unknown kernel family {name!r}; known: {', '.join(sorted(FAMILIES))}")
    return FAMILIES[name]


class KernelCallable:
    """One specialization of one family; call it with the family's tensors in KERNELS.md order."""

    def __init__(self, library: "KernelLibrary", family: str, width: int, block_table_width: int | None = None,
                 block_size: int | None = None, target: str | None = None):
        self.library, self.family, self.width = library, family, int(width)
        self.block_table_width, self.block_size, self.target = block_table_width, block_size, target
        spec = _family(family)
        self._nargs = len(spec.args)
        self._draft_index = next((i for i, a in enumerate(spec.args) if a.dtype == "draft"), None)
        self._resolved: dict[tuple[str, str], tuple[VariantEntry, object]] = {}

    def key(self, draft_dtype: str = "int32") -> str:
        return variant_key(self.family, self.width, self.block_table_width, self.block_size, draft_dtype)

    def _draft_dtype(self, tensors: Sequence) -> str:
        if self._draft_index is None:
            return "int32"
        import torch

        return "int64" if getattr(tensors[self._draft_index], "dtype", None) == torch.int64 else "int32"

    def resolve(self, target: str, draft_dtype: str = "int32") -> tuple[VariantEntry, object | None]:
        """The manifest entry for ``target``/``draft_dtype`` and its launcher once loaded."""
        hit = self._resolved.get((target, draft_dtype))
        if hit is None:
            hit = (self.library.entry(self.key(draft_dtype), target, draft_dtype=draft_dtype), None)
        return hit

    def __call__(self, *tensors) -> None:
        if len(tensors) != self._nargs:
            names = ", ".join(a.name for a in FAMILIES[self.family].args)
            raise KernelArgumentError(f"{self.key()}: expected {self._nargs} tensors ({names}), got {len(tensors)}")
        device = getattr(tensors[0], "device", None)
        if device is None:
            raise KernelArgumentError(f"{self.key()}: {FAMILIES[self.family].args[0].name} must be a torch.Tensor")
        target = self.target or TARGET_OF_DEVICE.get(device.type)
        if target is None or DEVICE_OF_TARGET.get(target) != device.type:
            raise KernelArgumentError(f"{self.key()}: tensors on {device} cannot run target {target or '(none)'}")
        draft_dtype = self._draft_dtype(tensors)
        entry, launcher = self.resolve(target, draft_dtype)
        batch = check_tensors(entry.args, tensors, W=entry.width, BT=entry.block_table_width,
                              NS=entry.num_splits, key=entry.key)
        if not batch:
            return  # nothing to do; the artifact is not even loaded
        if launcher is None:
            launcher = self.library.launcher(entry)
            self._resolved[(target, draft_dtype)] = (entry, launcher)
        launcher.launch(tensors, batch)

    def check_guards(self, *, min_seq_len: int, max_seq_len: int, batch: int,
                     draft_dtype: str = "int32") -> GuardResult:
        """Evaluate the guards of every built target of this specialization."""
        failed: list[tuple[str, str]] = []
        for e in self.library.entries():
            if e.key == self.key(draft_dtype):
                for f in check_guards(e.guards, min_seq_len=min_seq_len, max_seq_len=max_seq_len,
                                      batch=batch).failed:
                    failed += [f] if f not in failed else []
        return GuardResult(not failed, failed)

    def __repr__(self) -> str:
        return f"KernelCallable({self.key()}, target={self.target or 'by device'})"


class KernelLibrary:
    """The variants of one build folder; artifacts load on first use."""

    def __init__(self, path: str | Path):
        self.manifest: Manifest = load_manifest(path)
        self.root = self.manifest.root
        self._by_key = {(e.key, e.target): e for e in self.manifest.variants}
        self._launchers: dict[tuple[str, str], object] = {}
        self._lock = threading.Lock()

    def variants(self) -> list[str]:
        return sorted({e.key for e in self.manifest.variants})

    def entries(self) -> tuple[VariantEntry, ...]:
        return self.manifest.variants

    def has(self, family: str, width: int, block_table_width: int | None = None, block_size: int | None = None,
            *, target: str | None = None, draft_dtype: str | None = None) -> bool:
        _family(family)
        dtypes = [draft_dtype] if draft_dtype else ["int32", "int64"]
        keys = {variant_key(family, width, block_table_width, block_size, d) for d in dtypes}
        return any(k in keys and (target is None or t == target) for k, t in self._by_key)

    def get(self, family: str, width: int, block_table_width: int | None = None, block_size: int | None = None,
            *, target: str | None = None) -> KernelCallable:
        """A callable for the specialization; ``VariantNotBuilt`` if no target has it."""
        if not self.has(family, width, block_table_width, block_size, target=target):
            key = variant_key(family, width, block_table_width, block_size)
            raise VariantNotBuilt(f"{key} is not built{f' for target {target}' if target else ''}: run "
                                  f"`{build_command(family, width, block_table_width, block_size, target or 'c')}`")
        return KernelCallable(self, family, width, block_table_width, block_size, target)

    def entry(self, key: str, target: str, *, draft_dtype: str = "int32") -> VariantEntry:
        hit = self._by_key.get((key, target))
        if hit is None:
            family, _, _ = key.partition("__")
            others = sorted(t for k, t in self._by_key if k == key)
            spec = next((e for e in self.manifest.variants if e.key == key), None)
            cmd = (build_command(family, spec.width, spec.block_table_width, spec.block_size, target, draft_dtype)
                   if spec else f"specgen build --target {target}")
            built = f" (built for: {', '.join(others)})" if others else ""
            raise VariantNotBuilt(f"{key} is not built for target {target}{built}: run `{cmd}`")
        return hit

    def launcher(self, entry: VariantEntry):
        """The loaded launcher of ``entry`` (artifact verified and loaded once)."""
        slot = (entry.key, entry.target)
        with self._lock:
            if slot not in self._launchers:
                from specgen.runtime import loaders

                self._launchers[slot] = getattr(loaders, _LAUNCHERS[entry.target])(entry, self.root)
            return self._launchers[slot]

    def __repr__(self) -> str:
        return f"KernelLibrary({self.root}, {len(self.variants())} variants, targets={list(self.manifest.targets)})"


def load_library(path: str | Path) -> KernelLibrary:
    return KernelLibrary(path)


def render_package_init(manifest: dict) -> str:
    """Source of the build folder's ``__init__.py`` (templates/kernel_package.py.jinja)."""
    from importlib.resources import files

    import jinja2

    parsed = parse_manifest(manifest, Path("manifest.json"))
    text = files("specgen.templates").joinpath("kernel_package.py.jinja").read_text(encoding="utf-8")
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    return env.from_string(text).render(
        specgen_version=parsed.specgen_version, tilelang_version=parsed.tilelang_version or "unknown",
        targets=list(parsed.targets), keys=sorted({e.key for e in parsed.variants}))
