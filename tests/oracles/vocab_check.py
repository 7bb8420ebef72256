"""The vocabulary pass's kernels against their torch semantics: every output bit for bit but those that are no
result (``NO_RESULT``: the workspace's ``vocab_parts``, the target families' ``vocab_scratch``)."""

from __future__ import annotations

import torch

from specgen.runtime.semantics import SEMANTICS
from specgen.runtime.vocab_pass import logit_tiles_of
from specgen.specializations import FAMILIES
from specgen.specializations.vocab_sample import NO_RESULT


def give_tiles(args: dict, rows=slice(1, None, 2)) -> None:
    """The producer's ``logit_tiles`` of ``args``' logits for ``rows`` (default: the odd ones), the others unset."""
    tiles = args["logit_tiles"]
    tiles.fill_(-1)
    tiles[rows] = logit_tiles_of(args["logits"].float())[rows].to(tiles.device)


def check_against_semantics(kernel, family: str, args: dict, tiles: bool = True) -> None:
    """Run ``family``'s semantics on a copy of ``args`` and ``kernel`` on ``args``; assert every output equal,
    floats by their bits (-0.0 and NaN payloads included).  A target family's odd rows are given their logits'
    tiles (``give_tiles``) and the even ones unset, unless ``tiles`` is False (``args``' own tiles stand)."""
    names = [a.name for a in FAMILIES[family].args]
    if tiles and "logit_tiles" in names:
        give_tiles(args)
    want = {n: v.clone() for n, v in args.items()}
    SEMANTICS[family](*(want[n] for n in names))
    kernel(*(args[n] for n in names))
    for a in FAMILIES[family].outputs:
        if a.name in NO_RESULT:
            continue
        got, exp = args[a.name], want[a.name]
        if got.is_floating_point():
            got, exp = got.view(torch.int32), exp.view(torch.int32)
        assert torch.equal(got, exp), f"{family} {a.name}: {(got != exp).nonzero()[:5].tolist()}"
