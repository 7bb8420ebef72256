"""The library an inference engine imports: built kernel variants loaded without TileLang, the
captured speculative-verify step, its guards and its fallback.

    from specgen.runtime import SpecVerifyRuntime, capabilities_of, load_library

    lib = load_library("build/specgen_kernels")          # what ``specgen build`` wrote
    rt = SpecVerifyRuntime(lib, model_forward, capabilities_of(model), width=4, backend="cuda")
    res = rt.step(last_tokens, draft_tokens, seq_lens, block_table, seq_len_bounds=(lo, hi))

It stands on torch, ``specgen.specializations`` and the device bindings only (no compiler,
no engine, no plotting, no process launching); docs/integration.md walks through an
engine's side of it.
"""

from .buffers import alloc_step_buffers, buckets_for
from .capabilities import SpeculativeVerifyCapabilities, capabilities_of
from .device import BackendUnavailable
from .fallback import FALLBACK_REASONS, FastPathUnavailable
from .host_mirror import HOST_FIELDS, HostResult
from .library import (
    ArtifactError,
    KernelArgumentError,
    KernelLaunchError,
    KernelLibrary,
    ManifestError,
    VariantNotBuilt,
    load_library,
)
from .verify_graph import BACKENDS, Prologue, SpecVerifyRuntime, StepResult
from .vocab_pass import VocabPass

__all__ = [
    "ArtifactError",
    "BACKENDS",
    "BackendUnavailable",
    "FALLBACK_REASONS",
    "FastPathUnavailable",
    "HOST_FIELDS",
    "HostResult",
    "KernelArgumentError",
    "KernelLaunchError",
    "KernelLibrary",
    "ManifestError",
    "Prologue",
    "SpecVerifyRuntime",
    "SpeculativeVerifyCapabilities",
    "StepResult",
    "VariantNotBuilt",
    "VocabPass",
    "alloc_step_buffers",
    "buckets_for",
    "capabilities_of",
    "load_library",
]
