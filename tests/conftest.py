import os

import pytest
import torch


@pytest.fixture(autouse=True)
def _verifier_on(monkeypatch):
    """Every test runs the pass manager with the verifier on."""
    monkeypatch.setenv("SPECGEN_VERIFY", "1")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the lent H200)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


ENGINE_LAYOUT = {"widths": (2, 3, 4, 5, 6), "block_table_width": 8, "block_size": 16}


@pytest.fixture(scope="session")
def kernel_library(tmp_path_factory):
    """``(env_var, layout, boundaries, families=None) -> library``: the prebuilt folder ``env_var`` names
    (a GPU machine without TileLang), else a build of ``layout`` (c, and cuda with a GPU) into a temporary
    folder, int32 drafts only."""
    from specgen.runtime.library import load_library

    def get(env_var: str, layout: dict, boundaries: tuple[str, ...], families: tuple[str, ...] | None = None):
        prebuilt = os.environ.get(env_var)
        if prebuilt:
            return load_library(prebuilt)
        from specgen.driver import plan_and_build
        from specgen.specializations import Matrix

        out = tmp_path_factory.mktemp(env_var.lower())
        matrix = Matrix(widths=layout["widths"], block_table_widths=(layout["block_table_width"],),
                        block_sizes=(layout["block_size"],), draft_dtypes=("int32",))
        targets = ("c", "cuda") if torch.cuda.is_available() else ("c",)
        summary = plan_and_build(matrix, targets, out=out, jobs=2, boundaries=boundaries, families=families,
                                 progress=None)
        assert not summary.failed, summary.failed
        return load_library(out)

    return get


@pytest.fixture(scope="session")
def engine_kernels(kernel_library):
    """C kernels for the decode-engine tests (widths 2..6, bt8, bs16), built once per session.

    On a GPU machine without TileLang, SPECGEN_TEST_ENGINE_KERNELS names a prebuilt folder
    (specgen build --target c,cuda --widths 2-6 --block-table-widths 8 --block-sizes 16 ...).
    """
    return kernel_library("SPECGEN_TEST_ENGINE_KERNELS", ENGINE_LAYOUT, ("draft-to-verify", "verify-to-draft"))
