"""``specgen doctor``: which targets can run here, whether a build folder agrees with its manifest, what loads.

Problems (an artifact missing, altered or not in the manifest, a variant that
should load here and does not) are listed and make the exit status 1.
Variants built for a device this machine lacks (cuda on a CPU-only machine,
ascend) are information: listed as such, exit status 0.
"""

from __future__ import annotations

import importlib.util
import shutil


def _targets() -> None:
    import torch

    print(f"torch {torch.__version__}")
    print(
        "target c: can run (CPU)"
        if shutil.which("g++") or shutil.which("clang++")
        else "target c: artifacts load; building needs g++ or clang++"
    )
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        print(f"target cuda: {torch.cuda.get_device_name()} (sm_{major}{minor})")
    else:
        print("target cuda: no CUDA device visible to torch")
    print("nvcc: " + (shutil.which("nvcc") or "not on PATH (cuda builds need it)"))
    print(
        "target ascend: "
        + (
            "torch_npu importable"
            if importlib.util.find_spec("torch_npu")
            else "torch_npu not installed; nothing has been run on Ascend hardware"
        )
    )


def _cannot_run_here(target: str) -> str | None:
    """Why variants of ``target`` cannot run on this machine (information), or None when they can."""
    import torch

    if target == "cuda" and not torch.cuda.is_available():
        return "no CUDA device here, so they cannot run on this machine"
    if target == "ascend":
        return "Ascend artifacts are not launched by this runtime"
    return None


def _load(lib, entry) -> str | None:
    """None when ``entry`` loads here, else the first line of the reason."""
    try:
        lib.launcher(entry)
        return None
    except Exception as e:  # noqa: BLE001  every reason is worth one line here
        return str(e).splitlines()[0] if str(e) else type(e).__name__


def run(args) -> int:
    from ..codegen.folder import stale_staging
    from ..runtime.library import load_library
    from ..runtime.manifest import folder_problems

    _targets()
    try:
        lib = load_library(args.kernels)
    except Exception as e:  # noqa: BLE001  every reason is worth one line here
        print(f"kernels {args.kernels}: not loadable: {e}")
        return 1
    problems = folder_problems(lib.manifest)
    damaged = {p.split(":")[0] for p in problems}
    by_target: dict[str, list] = {}
    for e in lib.entries():
        by_target.setdefault(e.target, []).append(e)
    print(
        f"kernels {args.kernels}: {len(lib.entries())} variant(s) "
        f"({', '.join(f'{t}: {len(v)}' for t, v in sorted(by_target.items()))})"
    )
    for target, entries in sorted(by_target.items()):
        why = _cannot_run_here(target)
        intact = [e for e in entries if e.artifact not in damaged]
        if why:
            print(f"  {target}: {len(intact)} intact; information: {why} (not a failure of the build)")
            continue
        failed = [(e, r) for e in intact if (r := _load(lib, e)) is not None]
        print(f"  {target}: {len(intact) - len(failed)} load")
        problems += [f"{e.key} [{e.target}]: does not load: {r}" for e, r in failed]
    for d in stale_staging(lib.root):
        print(f"  information: {d} was left by an interrupted build; the next build into this folder removes it")
    for p in problems:
        print(f"  problem: {p}")
    if problems:
        print(f"{len(problems)} problem(s) in {args.kernels}")
    return 1 if problems else 0


def register(sub) -> None:
    p = sub.add_parser("doctor", help="what can run here, whether a build folder is intact, which variants load")
    p.add_argument("--kernels", default="build/specgen_kernels", help="a build folder")
    p.set_defaults(func=run)
