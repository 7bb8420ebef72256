"""``specgen doctor``: which targets can run here and which built variants load, with the reason when not."""

from __future__ import annotations

import importlib.util
import shutil


def _targets() -> None:
    import torch

    print(f"torch {torch.__version__}")
    print("target c: can run (CPU)" if shutil.which("g++") or shutil.which("clang++")
          else "target c: artifacts load; building needs g++ or clang++")
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        print(f"target cuda: {torch.cuda.get_device_name()} (sm_{major}{minor})")
    else:
        print("target cuda: no CUDA device visible to torch")
    print("nvcc: " + (shutil.which("nvcc") or "not on PATH (cuda builds need it)"))
    print("target ascend: " + ("torch_npu importable" if importlib.util.find_spec("torch_npu")
                               else "torch_npu not installed; nothing has been run on Ascend hardware"))


def _check(lib, entry) -> str:
    """Why ``entry`` does not load here, or "loads"; raises nothing."""
    import torch

    from ..runtime.manifest import read_artifact

    try:
        read_artifact(entry, lib.root)  # the sha256 check
        if entry.target == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("artifact intact; no CUDA device here to load it on")
        if entry.target == "ascend":
            raise RuntimeError("artifact intact; Ascend artifacts cannot be launched by this build")
        lib.launcher(entry)
        return "loads"
    except Exception as e:  # noqa: BLE001  every reason is worth one line here
        return f"does not load: {str(e).splitlines()[0]}"


def run(args) -> int:
    from ..runtime.library import load_library

    _targets()
    try:
        lib = load_library(args.kernels)
    except Exception as e:  # noqa: BLE001  every reason is worth one line here
        print(f"kernels {args.kernels}: not loadable: {e}")
        return 1
    bad = 0
    for entry in lib.entries():
        status = _check(lib, entry)
        bad += status != "loads"
        print(f"  {entry.key} [{entry.target}]: {status}")
    return 1 if bad else 0


def register(sub) -> None:
    p = sub.add_parser("doctor", help="what can run here, and which built variants load")
    p.add_argument("--kernels", default="build/specgen_kernels", help="a build folder")
    p.set_defaults(func=run)
