"""The vocabulary pass's kernels against their torch semantics: every output bit for bit but the workspace's
``vocab_parts`` (no result)."""

from __future__ import annotations

import torch

from specgen.runtime.semantics import SEMANTICS
from specgen.specializations import FAMILIES


def check_against_semantics(kernel, family: str, args: dict) -> None:
    """Run ``family``'s semantics on a copy of ``args`` and ``kernel`` on ``args``; assert every output equal,
    floats by their bits (-0.0 and NaN payloads included)."""
    names = [a.name for a in FAMILIES[family].args]
    want = {n: v.clone() for n, v in args.items()}
    SEMANTICS[family](*(want[n] for n in names))
    kernel(*(args[n] for n in names))
    for a in FAMILIES[family].outputs:
        if a.name == "vocab_parts":  # the chunks' partial results: no result
            continue
        got, exp = args[a.name], want[a.name]
        if got.is_floating_point():
            got, exp = got.view(torch.int32), exp.view(torch.int32)
        assert torch.equal(got, exp), f"{family} {a.name}: {(got != exp).nonzero()[:5].tolist()}"
