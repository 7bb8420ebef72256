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
makes it.  A family whose key lacks ``W`` has one variant for every width:
``get`` finds it at whatever width the caller passes, and each launch reads
``W`` from the tensors.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Sequence

from ..specializations.families import FAMILIES
from ..specializations.targets import TARGET_OF_DEVICE, TARGETS
from ..specializations.variants import (
    KeyFormatError,
    UnknownFamily,
    VariantSpec,
    build_command,
    family_of,
    variants_command,
)
from .guards import GuardResult, KernelArgumentError, check_guards, check_tensors, guard_pair
from .manifest import (
    ArtifactError,
    KernelLaunchError,
    Manifest,
    ManifestError,
    VariantEntry,
    load_manifest,
)

__all__ = [
    "ArtifactError",
    "KernelArgumentError",
    "KernelCallable",
    "KernelLaunchError",
    "KernelLibrary",
    "ManifestError",
    "UnknownFamily",
    "VariantNotBuilt",
    "build_command",
    "load_library",
]


class VariantNotBuilt(LookupError):
    """The requested specialization is not in the build; the message says how to build it."""


def _spec(
    family: str, width: int, block_table_width: int | None, block_size: int | None, draft_dtype: str = "int32"
) -> VariantSpec:
    """``family`` at these parameters, keeping only those its key names (like ``VariantSpec.of``; a family
    whose key lacks ``W`` gets the variant for every width)."""
    fam = family_of(family)
    return VariantSpec(
        family,
        width,
        block_table_width if "BT" in fam.key_params else None,
        block_size if "BS" in fam.key_params else None,
        draft_dtype if fam.has_draft_dtype else "int32",
    )


class KernelCallable:
    """One specialization of one family; call it with the family's tensors in ``docs/kernels.md`` order."""

    def __init__(
        self,
        library: "KernelLibrary",
        family: str,
        width: int,
        block_table_width: int | None = None,
        block_size: int | None = None,
        target: str | None = None,
    ):
        self.library, self.family, self.width = library, family, int(width)
        self.block_table_width, self.block_size, self.target = block_table_width, block_size, target
        spec = family_of(family)
        self._nargs = len(spec.args)
        self._draft_index = next((i for i, a in enumerate(spec.args) if a.dtype == "draft"), None)
        self._resolved: dict[tuple[str, str], tuple[VariantEntry, object]] = {}
        self._guards: dict[str, tuple] = {}  # draft dtype -> the guards of every built target, each once

    def variant(self, draft_dtype: str = "int32") -> VariantSpec:
        return _spec(self.family, self.width, self.block_table_width, self.block_size, draft_dtype)

    def key(self, draft_dtype: str = "int32") -> str:
        return self.variant(draft_dtype).key

    def _draft_dtype(self, tensors: Sequence) -> str:
        if self._draft_index is None:
            return "int32"
        import torch

        return "int64" if getattr(tensors[self._draft_index], "dtype", None) == torch.int64 else "int32"

    def resolve(self, target: str, draft_dtype: str = "int32") -> tuple[VariantEntry, object | None]:
        """The manifest entry for ``target``/``draft_dtype`` and its launcher once loaded."""
        hit = self._resolved.get((target, draft_dtype))
        if hit is None:
            entry = self.library.entry(
                self.key(draft_dtype),
                target,
                draft_dtype=draft_dtype,
                width=self.width,
                block_table_width=self.block_table_width,
                block_size=self.block_size,
            )
            hit = (entry, None)
        return hit

    def __call__(self, *tensors) -> None:
        if len(tensors) != self._nargs:
            names = ", ".join(a.name for a in FAMILIES[self.family].args)
            raise KernelArgumentError(f"{self.key()}: expected {self._nargs} tensors ({names}), got {len(tensors)}")
        device = getattr(tensors[0], "device", None)
        if device is None:
            raise KernelArgumentError(f"{self.key()}: {FAMILIES[self.family].args[0].name} must be a torch.Tensor")
        target = self.target or TARGET_OF_DEVICE.get(device.type)
        if target is None or target not in TARGETS or TARGETS[target].device != device.type:
            raise KernelArgumentError(f"{self.key()}: tensors on {device} cannot run target {target or '(none)'}")
        draft_dtype = self._draft_dtype(tensors)
        entry, launcher = self.resolve(target, draft_dtype)
        batch = check_tensors(  # W None: a variant for every width reads the tensors' W
            entry.args, tensors, W=entry.fixed_width, BT=entry.block_table_width, NS=entry.num_splits, key=entry.key
        )
        if not batch:
            return  # nothing to do; the artifact is not even loaded
        if launcher is None:
            launcher = self.library.launcher(entry)
            self._resolved[(target, draft_dtype)] = (entry, launcher)
        launcher.launch(tensors, batch)

    def check_guards(
        self, *, min_seq_len: int, max_seq_len: int, batch: int, draft_dtype: str = "int32"
    ) -> GuardResult:
        """Evaluate the guards of every built target of this specialization."""
        guards = self._guards.get(draft_dtype)
        if guards is None:  # the manifest does not change under a loaded library: collect them once
            key = self.key(draft_dtype)
            pairs = (guard_pair(g) for e in self.library.entries() if e.key == key for g in e.guards)
            guards = self._guards[draft_dtype] = tuple(dict.fromkeys(pairs))
        failed = check_guards(guards, min_seq_len=min_seq_len, max_seq_len=max_seq_len, batch=batch).failed
        return GuardResult(not failed, failed)

    def __repr__(self) -> str:
        return f"KernelCallable({self.key()}, target={self.target or 'by device'})"


def stale_reason(entry: VariantEntry) -> str | None:
    """Why ``entry`` no longer fits its family (its arguments differ from the family's today: a folder built
    before the contract changed), or None; a family this process does not know is taken as it is."""
    fam = FAMILIES.get(entry.family)
    if fam is None:
        return None
    want = [(a.name, a.shape, a.output) for a in fam.args]
    got = [(a.name, a.shape, a.output) for a in entry.args]
    if want == got:
        return None
    return (
        f"built for another contract of {entry.family} (arguments {', '.join(n for n, _, _ in got)}; "
        f"today {', '.join(n for n, _, _ in want)})"
    )


class KernelLibrary:
    """The variants of one build folder; artifacts load on first use.  A variant built for another contract
    of its family (``stale``) counts as not built: calling it would pass the wrong arguments."""

    def __init__(self, path: str | Path):
        self.manifest: Manifest = load_manifest(path)
        self.root = self.manifest.root
        stale = {(e.key, e.target): stale_reason(e) for e in self.manifest.variants}
        self._stale = {k: why for k, why in stale.items() if why}
        self._by_key = {(e.key, e.target): e for e in self.manifest.variants if (e.key, e.target) not in self._stale}
        self._launchers: dict[tuple[str, str], object] = {}
        self._lock = threading.Lock()

    def variants(self) -> list[str]:
        return sorted({key for key, _ in self._by_key})

    def stale(self) -> dict[tuple[str, str], str]:
        """``(key, target) -> why`` of every variant built for another contract of its family (not usable)."""
        return dict(self._stale)

    def _stale_note(self, keys: set[str]) -> str:
        whys = sorted({why for (k, _), why in self._stale.items() if k in keys})
        return f" (the folder's variant was {whys[0]}; a build over the folder replaces it)" if whys else ""

    def entries(self) -> tuple[VariantEntry, ...]:
        return self.manifest.variants

    def has(
        self,
        family: str,
        width: int,
        block_table_width: int | None = None,
        block_size: int | None = None,
        *,
        target: str | None = None,
        draft_dtype: str | None = None,
    ) -> bool:
        dtypes = [draft_dtype] if draft_dtype else ["int32", "int64"]
        keys = {_spec(family, width, block_table_width, block_size, d).key for d in dtypes}
        return any(k in keys and (target is None or t == target) for k, t in self._by_key)

    def get(
        self,
        family: str,
        width: int,
        block_table_width: int | None = None,
        block_size: int | None = None,
        *,
        target: str | None = None,
    ) -> KernelCallable:
        """A callable for the specialization; ``VariantNotBuilt`` if no target has it."""
        if not self.has(family, width, block_table_width, block_size, target=target):
            spec = _spec(family, width, block_table_width, block_size)
            raise VariantNotBuilt(
                f"{spec.key} is not built{f' for target {target}' if target else ''}{self._stale_note({spec.key})}: "
                f"run `{build_command(spec, target or 'c', width)} --out {self.root}`"
            )
        return KernelCallable(self, family, width, block_table_width, block_size, target)

    def entry(
        self,
        key: str,
        target: str,
        *,
        draft_dtype: str = "int32",
        width: int | None = None,
        block_table_width: int | None = None,
        block_size: int | None = None,
    ) -> VariantEntry:
        """The manifest entry of ``key`` for ``target``; ``VariantNotBuilt`` with the build that makes it.

        ``width`` / ``block_table_width`` / ``block_size``: the caller's layout, which the suggested build
        uses for a family whose key does not name them.
        """
        hit = self._by_key.get((key, target))
        if hit is None:
            others = sorted(t for k, t in self._by_key if k == key)
            try:
                spec = VariantSpec.parse(key)  # the key names the family, width, layout and draft dtype
            except (KeyFormatError, LookupError):  # not a key of specgen's families
                spec = None
            cmd = (
                variants_command(
                    [spec], target, width=width, block_table_width=block_table_width, block_size=block_size
                )
                if spec is not None
                else f"specgen build --target {target}"
            ) + f" --out {self.root}"
            built = f" (built for: {', '.join(others)})" if others else ""
            raise VariantNotBuilt(
                f"{key} is not built for target {target}{built}{self._stale_note({key})}: run `{cmd}`"
            )
        return hit

    def launcher(self, entry: VariantEntry):
        """The loaded launcher of ``entry`` (artifact verified and loaded once)."""
        slot = (entry.key, entry.target)
        with self._lock:
            if slot not in self._launchers:
                from . import loaders

                self._launchers[slot] = getattr(loaders, TARGETS[entry.target].launcher)(entry, self.root)
            return self._launchers[slot]

    def __repr__(self) -> str:
        return f"KernelLibrary({self.root}, {len(self.variants())} variants, targets={list(self.manifest.targets)})"


def load_library(path: str | Path) -> KernelLibrary:
    return KernelLibrary(path)
