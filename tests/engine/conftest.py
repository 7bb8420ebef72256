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
def block_kernels(kernel_library):
    """C kernels of the block-draft plans (draft-to-verify, context-kv) at widths 4, 8, 16, bt8, bs16.

    On a GPU machine without TileLang, SPECGEN_TEST_BLOCK_KERNELS names a prebuilt folder
    (specgen build --target c,cuda --boundary draft-to-verify,context-kv --widths 4,8,16
    --block-table-widths 8 --block-sizes 16 --draft-dtypes int32
    --families spec_verify_head_update,greedy_prefix_verify,context_kv_update --out ...).
    """
    return kernel_library("SPECGEN_TEST_BLOCK_KERNELS", BLOCK_LAYOUT, ("draft-to-verify", "context-kv"),
                          BLOCK_FAMILIES)


@pytest.fixture(scope="module")
def tiny_target():
    from specgen.runtime.engine import Qwen3Model

    return Qwen3Model.create("tiny", seed=0)
