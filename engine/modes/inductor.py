"""The ``inductor`` mode: specgen's plan and captured pipeline, the families run as Inductor-compiled torch.

It is ``specgen`` mode with one thing swapped: every kernel step of the
build's plans calls its family's torch semantics (``runtime/semantics.py``)
compiled by ``torch.compile`` (the engine's ``compile_backend``) instead of
the generated variant.  The plan, the persistent buffers, the captured
verify graph, the device guard, the event handoff and the lagged read-back
are ``SpecVerifyRuntime``'s, unchanged; so against ``specgen`` this mode
isolates what the generated kernels buy, and against ``compile`` what the
pipeline buys.  It needs the build's manifest (the plans and each variant's
layout and split count), not its artifacts.
"""

from __future__ import annotations

import functools
import threading

import torch

from ...runtime import semantics
from ...runtime.library import KernelLibrary
from ...specializations.families import DEFAULT_NUM_SPLITS
from .base import register_mode
from .specgen import SpecgenMode

__all__ = ["CompiledSemanticsLibrary", "InductorMode", "compiled_semantics"]

_COMPILED: dict[tuple, object] = {}


def compiled_semantics(family: str, block_size: int | None, num_splits: int | None, backend: str):
    """``family``'s torch semantics at one layout under ``torch.compile`` (static shapes, one graph)."""
    key = (family, block_size, num_splits, backend)
    if key not in _COMPILED:
        cfg = torch._dynamo.config
        name = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
        setattr(cfg, name, max(getattr(cfg, name), 256))  # one static-shape graph per (batch, width)
        kwargs = semantics.semantics_kwargs(family, block_size or 1, num_splits or DEFAULT_NUM_SPLITS)
        fn = functools.partial(semantics.SEMANTICS[family], **kwargs)
        _COMPILED[key] = torch.compile(fn, backend=backend, fullgraph=True, dynamic=False)
    return _COMPILED[key]


class _CompiledLauncher:
    """A variant's launcher that runs the family's compiled semantics over the same tensors."""

    def __init__(self, entry, backend: str):
        self.entry = entry
        self.fn = compiled_semantics(entry.family, entry.block_size, entry.num_splits, backend)

    def launch(self, tensors, batch: int) -> None:
        self.fn(*tensors)

    def __repr__(self) -> str:
        return f"CompiledLauncher({self.entry.key})"


class CompiledSemanticsLibrary(KernelLibrary):
    """``base``'s manifest and plans; every launcher runs the compiled torch semantics."""

    def __init__(self, base: KernelLibrary, backend: str):  # super().__init__ would reload the manifest
        self.manifest, self.root, self.backend = base.manifest, base.root, backend
        self._by_key = dict(base._by_key)
        self._launchers = {}
        self._lock = threading.Lock()

    def launcher(self, entry):
        slot = (entry.key, entry.target)
        with self._lock:
            if slot not in self._launchers:
                self._launchers[slot] = _CompiledLauncher(entry, self.backend)
            return self._launchers[slot]


@register_mode
class InductorMode(SpecgenMode):
    """``SpecVerifyRuntime``'s verify graph with the families as Inductor-compiled torch; see the module docstring."""

    name = "inductor"
    cpu_skip_reason = (
        "needs CUDA (Inductor-compiled family semantics inside the captured verify graph); skipped on the CPU"
    )

    def kernel_library(self):
        return CompiledSemanticsLibrary(self.engine.library, self.engine.compile_backend)
