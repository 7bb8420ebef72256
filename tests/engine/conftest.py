import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The tiny model's ops are far too small for intra-op threads to pay off."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny():
    """The tiny target and its MTP head (seeds 0 and 1), once per test module."""
    from specgen.runtime.engine import MTPHead, Qwen3Model

    m = Qwen3Model.create("tiny", seed=0)
    return m, MTPHead.create(m, seed=1)


BLOCK_LAYOUT = {"widths": (4, 8, 16), "block_table_width": 8, "block_size": 16}
BLOCK_FAMILIES = ("spec_verify_head_update", "greedy_prefix_verify", "context_kv_update")


@pytest.fixture(scope="session")
def block_kernels(tmp_path_factory):
    """C kernels of the block-draft plans (draft-to-verify, context-kv) at widths 4, 8, 16, bt8, bs16.

    On a GPU machine without TileLang, SPECGEN_TEST_BLOCK_KERNELS names a prebuilt folder
    (specgen build --target c,cuda --boundary draft-to-verify,context-kv --widths 4,8,16
    --block-table-widths 8 --block-sizes 16 --draft-dtypes int32
    --families spec_verify_head_update,greedy_prefix_verify,context_kv_update --out ...).
    """
    import os

    from specgen.runtime.library import load_library

    prebuilt = os.environ.get("SPECGEN_TEST_BLOCK_KERNELS")
    if prebuilt:
        return load_library(prebuilt)
    from specgen.driver import plan_and_build
    from specgen.specializations import Matrix

    out = tmp_path_factory.mktemp("block_kernels")
    matrix = Matrix(widths=BLOCK_LAYOUT["widths"], block_table_widths=(BLOCK_LAYOUT["block_table_width"],),
                    block_sizes=(BLOCK_LAYOUT["block_size"],), draft_dtypes=("int32",))
    targets = ("c", "cuda") if torch.cuda.is_available() else ("c",)
    summary = plan_and_build(matrix, targets, out=out, jobs=2, boundaries=("draft-to-verify", "context-kv"),
                             families=BLOCK_FAMILIES, progress=None)
    assert not summary.failed, summary.failed
    return load_library(out)


@pytest.fixture(scope="module")
def tiny_target():
    from specgen.runtime.engine import Qwen3Model

    return Qwen3Model.create("tiny", seed=0)
