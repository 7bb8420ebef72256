"""The tiling prefix: a warp-cooperative shuffle scan on cuda, the per-thread serial sum elsewhere.

Both compute the same int64 exclusive prefix of the block counts; the C
kernels are checked against the semantics by the C fuzz, the cuda ones by
``test_fuzz_cuda.py`` on a GPU (batches of 1 to 1000: many warps and blocks,
partial last warps).  Here: which spelling each target renders, in the
standalone family and inside the composite head, and that the cuda one
lowers to warp shuffles whose mask holds only the warp's active lanes.
"""

from __future__ import annotations

import pytest

from specgen.codegen.lower import lower
from specgen.codegen.templates import render_variant
from specgen.specializations.variants import VariantSpec

SPECS = [VariantSpec("spec_verify_attention_tiling_update", 16, None, 128, "int32", 8),
         VariantSpec("spec_verify_head_update", 2, 64, 128)]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.key)
def test_each_target_renders_its_prefix(spec):
    cuda, c = render_variant(spec, "cuda"), render_variant(spec, "c")
    assert "T.shfl_sync(incl" in cuda and "for k in T.serial(T.ceildiv(warp0 - lane, n_active)):" in cuda
    assert "for q in T.serial(b):" not in cuda and "for q in T.serial(B):" not in cuda
    assert "shfl" not in c and "for q in T.serial(b):" in c and "for q in T.serial(B):" in c


@pytest.mark.slow
def test_cuda_prefix_lowers_to_masked_shuffles():
    source = lower(render_variant(SPECS[1], "cuda"), "cuda", symbol=SPECS[1].key).source
    assert source.count("__shfl_sync(") == 5  # two scans, their broadcast, the max scan and its broadcast
    assert "4294967295" in source and "- (uint)1" in source  # full warp, or the low n_active lanes
