"""The kernel families as torch custom ops: ``torch.ops.specgen.<family>``.

Each family is one mutating op whose tensors follow ``docs/kernels.md`` and whose
specialization (width, and block-table width / block size where the family's
key has them) trails as ints::

    use_library(load_library("build/specgen_kernels"))
    torch.ops.specgen.spec_verify_metadata_update(
        seq_lens, block_table, positions, slot_mapping, kv_lens, query_start_loc, 4, 64, 128)

The outputs are the mutated arguments, so the ops trace under torch.compile
(fake implementations do nothing: outputs keep their shapes) and record into
CUDA graphs through the library's launchers.  Importing this module twice (or
reloading it) reuses the registered ops; the kernels always come from the
library most recently passed to ``use_library``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from ..specializations.families import FAMILIES
from ..specializations.variants import KEY_PARAM_FIELDS
from .library import KernelLibrary, load_library

NAMESPACE = "specgen"

_library: KernelLibrary | None = None
_callables: dict[tuple, object] = {}


def use_library(library: KernelLibrary | str | Path | None) -> KernelLibrary | None:
    """Make ``library`` (or the build folder at that path) serve the ops; return the previous one."""
    global _library
    previous = _library
    _library = load_library(library) if isinstance(library, (str, Path)) else library
    _callables.clear()
    return previous


def current_library() -> KernelLibrary | None:
    return _library


def schema(family: str) -> str:
    """``(Tensor seq_lens, ..., Tensor(a2!) positions, ..., int width, ...) -> ()``."""
    spec = FAMILIES[family]
    params = [f"Tensor(a{i}!) {a.name}" if a.output else f"Tensor {a.name}" for i, a in enumerate(spec.args)]
    params += [f"int {KEY_PARAM_FIELDS[p]}" for p in spec.key_params]
    return f"({', '.join(params)}) -> ()"


def _state():
    # Resolve through sys.modules so ops registered by an earlier copy of this
    # module (importlib.reload) still see the library set on the current one.
    return sys.modules.get(__name__) or sys.modules[__spec__.name]


def _make_impl(family: str):
    spec = FAMILIES[family]
    n = len(spec.args)
    key_names = [KEY_PARAM_FIELDS[p] for p in spec.key_params]

    def impl(*args) -> None:
        state = _state()
        if state._library is None:
            raise RuntimeError(
                f"torch.ops.{NAMESPACE}.{family}: no kernel library; call "
                f"specgen.runtime.ops.use_library(<build folder>) first"
            )
        tensors, keys = args[:n], tuple(int(k) for k in args[n:])
        fn = state._callables.get((family, keys))
        if fn is None:
            fn = state._callables[(family, keys)] = state._library.get(family, **dict(zip(key_names, keys)))
        fn(*tensors)

    impl.__name__ = family
    return impl


def _fake(*args) -> None:
    return None


def _register(family: str):
    if hasattr(getattr(torch.ops, NAMESPACE), family):
        return getattr(getattr(torch.ops, NAMESPACE), family)
    mutated = [a.name for a in FAMILIES[family].outputs]
    op = torch.library.custom_op(
        f"{NAMESPACE}::{family}", _make_impl(family), mutates_args=mutated, schema=schema(family)
    )
    op.register_fake(_fake)
    return getattr(getattr(torch.ops, NAMESPACE), family)


OPS = {family: _register(family) for family in FAMILIES}
