"""The targets a build can emit, and what each means for the build and the runtime.

One row per target: the torch device type its artifacts run on, the TileLang
dialect its programs are written in, the suffixes of the generated source and
the compiled artifact, the default architecture and the runtime's launcher.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    device: str  # torch device type the artifacts run on
    dialect: str  # TileLang language module the programs import
    source_suffix: str
    artifact_suffix: str
    default_arch: str | None
    launcher: str  # class name in specgen.runtime.loaders


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("c", "cpu", "tilelang.language", ".c", ".so", None, "CLauncher"),
        Target("cuda", "cuda", "tilelang.language", ".cu", ".cubin", "sm_90", "CudaLauncher"),
        Target("ascend", "npu", "tilelang.ascend.language", ".cpp", ".o", None, "AscendLauncher"),
    )
}
TARGET_NAMES = tuple(TARGETS)
TARGET_OF_DEVICE = {t.device: t.name for t in TARGETS.values()}


def target(name: str) -> Target:
    """The row of ``name``; ``ValueError`` naming the known targets otherwise."""
    try:
        return TARGETS[name]
    except KeyError:
        raise ValueError(f"unknown target '{name}' (known: {', '.join(TARGETS)})") from None
