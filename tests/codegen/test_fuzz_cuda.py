"""Every family's CUDA kernel against its torch semantics over the whole int32 range (GPU only).

The same inputs and checks as ``test_fuzz_c.py`` (``KernelFuzz`` in this
folder's conftest), run on every cuda variant of the prebuilt folders named by
SPECGEN_TEST_CUDA_FUZZ_KERNELS (several joined with ``os.pathsep``); the GPU
machine has no TileLang, so the kernels come from there.  The folders the
documented run uses (``benchmarks/sanitize_kernels.sh``):

    specgen build --target c,cuda --out build/kbuild-cuda                      # the default matrix (W 4-6, 8, 16)
    specgen build --target cuda --widths 6 --block-table-widths 3 --block-sizes 5 --out build/kbuild-cuda-edge

The batches include those whose B * W rows end a thread block exactly or one
row past it at W = 5 and 16 (the per-row head families launch B * W threads);
the default matrix holds the head at W = 16 through its block widths.
Without the variable the test builds the production layout, the edge layout
and the head at W = 16 itself (TileLang and nvcc needed).  SPECGEN_FUZZ_EXAMPLES sets the
examples per variant (default 300; fewer under compute-sanitizer, which is
slow).  Run under the sanitizers with PYTORCH_NO_CUDA_MEMORY_CACHING=1 so that
each tensor is its own allocation and an access past its end is reported.
"""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from specgen.runtime.library import load_library
from specgen.specializations.families import FAMILIES

pytestmark = pytest.mark.gpu

ENV = "SPECGEN_TEST_CUDA_FUZZ_KERNELS"
EXAMPLES = int(os.environ.get("SPECGEN_FUZZ_EXAMPLES", "300"))
INT32 = st.integers(-(2**31), 2**31 - 1)
EXPLICIT = st.lists(INT32, max_size=3)
BATCH = st.one_of(st.integers(1, 4), st.sampled_from([1, 8, 9, 25, 26, 127, 128, 129, 256, 1000]))


def _libraries(tmp_path_factory):
    folders = [f for f in os.environ.get(ENV, "").split(os.pathsep) if f]
    if folders:
        return [load_library(f) for f in folders]
    from specgen.driver import plan_and_build as build
    from specgen.specializations import Matrix

    libs = []
    for w, bt, bs, extra in ((4, 64, 128, (16,)), (6, 3, 5, ())):
        out = tmp_path_factory.mktemp(f"fuzz_cuda_w{w}_bt{bt}_bs{bs}")
        summary = build(
            Matrix(widths=(w,), block_table_widths=(bt,), block_sizes=(bs,), block_widths=extra),
            ("cuda",),
            out=out,
            jobs=2,
            progress=None,
        )
        assert not summary.failed, summary.failed
        libs.append(load_library(out))
    return libs


@pytest.fixture(scope="module")
def cuda_variants(tmp_path_factory):
    """(variant tuple, KernelCallable) for every cuda variant of the folders."""
    out = {}
    for lib in _libraries(tmp_path_factory):
        for e in lib.entries():
            if e.target == "cuda":
                v = (e.family, e.width, e.block_table_width, e.block_size, e.draft_dtype, e.num_splits or 8)
                out[v] = lib.get(e.family, e.width, e.block_table_width, e.block_size, target="cuda")
    return out


def _fuzz(variant, kernel, kernel_fuzz):
    dev = torch.device("cuda")

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(batch=BATCH, seq=EXPLICIT, acc=EXPLICIT, entries=EXPLICIT, seed=st.integers(0, 2**32 - 1))
    @example(batch=1, seq=[-5], acc=[0], entries=[0], seed=0)  # slots 123..126 of block 0
    @example(batch=1, seq=[0], acc=[3], entries=[-1], seed=0)  # a -1 entry gave slots -128..-126
    @example(batch=2, seq=[0, 0], acc=[2**31 - 1], entries=[1], seed=0)  # hidden_rows far outside
    @example(batch=2, seq=[0, 0], acc=[-(2**31)], entries=[1], seed=0)  # the CPU kernel segfaulted
    @example(batch=1, seq=[2**31 - 1], acc=[3], entries=[1], seed=0)  # positions wrapped past int32
    def run(batch, seq, acc, entries, seed):
        ins = {k: x.to(dev) for k, x in kernel_fuzz.inputs(variant, batch, seq, acc, entries, seed).items()}
        got = kernel_fuzz.outputs(variant, batch, device=dev)
        kernel(*[(got if a.output else ins)[a.name] for a in FAMILIES[variant[0]].args])
        torch.cuda.synchronize()
        kernel_fuzz.check(variant, ins, got)

    run()


@pytest.mark.parametrize("family", sorted(f for f, fam in FAMILIES.items() if not fam.uses_vocab))  # V: own tests
def test_cuda_kernel_matches_semantics_everywhere(cuda_variants, kernel_fuzz, one_torch_thread, family):
    mine = sorted((v for v in cuda_variants if v[0] == family), key=str)
    assert mine, f"no cuda variant of {family} in the folders of {ENV}"
    for v in mine:
        _fuzz(v, cuda_variants[v], kernel_fuzz)
