import contextlib
import fcntl
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import torch

# test-only oracles (tests/oracles/) import as ``oracles.<name>``
sys.path.insert(0, str(Path(__file__).parent))


SHARED_ENV = "SPECGEN_TEST_SHARED"  # a folder every process of the run shares (pytest-xdist's workers too)


def pytest_configure(config):
    """One lowering and compile cache for the whole run (``SPECGEN_CODEGEN_CACHE``, see ``codegen/lower.py``)
    and one folder for the session's kernel libraries (``kernel_library``), made by the process that starts
    the run: pytest-xdist's workers, spawned workers and ``specgen`` subprocesses inherit both, so a variant
    built into many folders, by any process, is lowered and compiled once.  The builds still count, stamp
    and write what they make as before.  Values set outside are kept."""
    if hasattr(config, "workerinput"):  # an xdist worker: the controller made them
        return
    made = []
    for name in ("SPECGEN_CODEGEN_CACHE", SHARED_ENV):
        if os.environ.get(name) is None:
            os.environ[name] = tempfile.mkdtemp(prefix=f"{name.lower()}-")
            made.append(name)
    config._specgen_made = made


def pytest_unconfigure(config):
    for name in getattr(config, "_specgen_made", ()):
        shutil.rmtree(os.environ.pop(name), ignore_errors=True)


@pytest.fixture(autouse=True)
def _verifier_on(monkeypatch):
    """Every test runs the pass manager with the verifier on."""
    monkeypatch.setenv("SPECGEN_VERIFY", "1")


def pytest_runtest_logreport(report):
    """With SPECGEN_FAILURES_TO=PATH, each failure's traceback is appended to PATH as it happens: a run that is
    killed at a time limit (a lent GPU's) still says what failed."""
    path = os.environ.get("SPECGEN_FAILURES_TO")
    if path and report.failed:
        with open(path, "a") as f:
            f.write(f"FAILED {report.nodeid} ({report.when})\n{report.longreprtext}\n\n")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the lent H200)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


ENGINE_LAYOUT = {"widths": (2, 3, 4, 5, 6), "block_table_width": 8, "block_size": 16}


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock on ``path`` (a file), held across the processes of the run until the file closes."""
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session")
def kernel_library():
    """``(env_var, layout, boundaries, families=None) -> library``: the prebuilt folder ``env_var`` names
    (a GPU machine without TileLang), else a build of ``layout`` (c, and cuda with a GPU), int32 drafts only,
    made once per run: the first process to need it builds it into the run's shared folder
    (``pytest_configure``) while the others wait for it."""
    from specgen.runtime.library import load_library

    def get(env_var: str, layout: dict, boundaries: tuple[str, ...], families: tuple[str, ...] | None = None):
        prebuilt = os.environ.get(env_var)
        if prebuilt:
            return load_library(prebuilt)
        from specgen.driver import plan_and_build
        from specgen.specializations import Matrix

        root = Path(os.environ[SHARED_ENV])  # pytest_configure made it, or it was set outside
        out, done = root / env_var.lower(), root / f"{env_var.lower()}.done"
        with _locked(root / f"{env_var.lower()}.lock"):
            if not done.exists():
                shutil.rmtree(out, ignore_errors=True)  # a build that failed before
                matrix = Matrix(
                    widths=layout["widths"],
                    block_table_widths=(layout["block_table_width"],),
                    block_sizes=(layout["block_size"],),
                    draft_dtypes=("int32",),
                )
                targets = ("c", "cuda") if torch.cuda.is_available() else ("c",)
                summary = plan_and_build(
                    matrix, targets, out=out, jobs=2, boundaries=boundaries, families=families, progress=None
                )
                assert not summary.failed, summary.failed
                done.touch()
        return load_library(out)

    return get


@pytest.fixture(scope="session")
def engine_kernels(kernel_library):
    """C kernels for the decode-engine tests (widths 2..6, bt8, bs16), built once per session.

    On a GPU machine without TileLang, SPECGEN_TEST_ENGINE_KERNELS names a prebuilt folder
    (specgen build --target c,cuda --widths 2-6 --block-table-widths 8 --block-sizes 16 ...).
    """
    return kernel_library("SPECGEN_TEST_ENGINE_KERNELS", ENGINE_LAYOUT, ("draft-to-verify", "verify-to-draft"))


APP_TESTS = ("models", "parallel", "engine", "bench")


@pytest.fixture(autouse=True, scope="module")
def one_thread(request):
    """The tiny model's ops are far too small for intra-op threads to pay off (the application's tests)."""
    if Path(request.node.path).relative_to(Path(__file__).parent).parts[0] not in APP_TESTS:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny():
    """The tiny target and its MTP head (seeds 0 and 1), once per test module."""
    from specgen.models import MTPHead, Qwen3Model

    m = Qwen3Model.create("tiny", seed=0)
    return m, MTPHead.create(m, seed=1)


HYBRID_LAYOUT = {"widths": (2, 3, 4, 5, 6, 8), "block_table_width": 8, "block_size": 16}


@pytest.fixture(scope="session")
def hybrid_kernels(kernel_library):
    """C kernels of a hybrid target's plans (draft-to-verify-linear, verify-to-draft, context-kv), widths 2..6
    and 8, bt8, bs16.

    On a GPU machine without TileLang, SPECGEN_TEST_HYBRID_KERNELS names a prebuilt folder
    (specgen build --target c,cuda --widths 2-6,8 --block-table-widths 8 --block-sizes 16 --draft-dtypes int32
    --boundary draft-to-verify-linear,verify-to-draft,context-kv --out ...).
    """
    boundaries = ("draft-to-verify-linear", "verify-to-draft", "context-kv")
    return kernel_library("SPECGEN_TEST_HYBRID_KERNELS", HYBRID_LAYOUT, boundaries)


BLOCK_LAYOUT = {"widths": (4, 8, 16), "block_table_width": 8, "block_size": 16}
BLOCK_FAMILIES = (
    "spec_verify_head_update",
    "spec_verify_context_tail_update",
    "greedy_prefix_verify",
    "context_kv_update",
    "prepare_next_block",
    "spec_batch_row_remap",
    "spec_verify_guard_check",
)


@pytest.fixture(scope="session")
def block_kernels(kernel_library):
    """C kernels of the block-draft plans (draft-to-verify, context-kv) at widths 4, 8, 16, bt8, bs16.

    On a GPU machine without TileLang, SPECGEN_TEST_BLOCK_KERNELS names a prebuilt folder
    (specgen build --target c,cuda --boundary draft-to-verify,context-kv --widths 4,8,16
    --block-table-widths 8 --block-sizes 16 --draft-dtypes int32
    --families spec_verify_head_update,spec_verify_context_tail_update,greedy_prefix_verify,context_kv_update,
    prepare_next_block,spec_batch_row_remap,spec_verify_guard_check --out ...).
    """
    return kernel_library("SPECGEN_TEST_BLOCK_KERNELS", BLOCK_LAYOUT, ("draft-to-verify", "context-kv"), BLOCK_FAMILIES)


@pytest.fixture(scope="module")
def tiny_target():
    from specgen.models import Qwen3Model

    return Qwen3Model.create("tiny", seed=0)


SAMPLING_LAYOUT = {"widths": (3, 4), "block_table_width": 8, "block_size": 16}
SAMPLING_BOUNDARIES = ("draft-to-verify", "draft-to-verify-linear", "verify-to-draft-sampled", "context-kv-sampled")
SAMPLING_FAMILIES = (
    "spec_verify_head_update",
    "spec_verify_hybrid_head_update",
    "spec_verify_linear_state_update",
    "spec_verify_token_update",
    "spec_verify_metadata_update",
    "spec_verify_attention_tiling_update",
    "spec_rejection_verify",
    "prepare_next_draft",
    "context_kv_update",
    "prepare_next_block",
    "spec_rejection_tail_update",
    "spec_rejection_context_tail_update",
    "spec_verify_guard_check",
    "spec_target_sample",
    "spec_target_sample_dense",
    "spec_draft_sample",
    "spec_target_sample_tiles",
    "spec_target_sample_dense_tiles",
)


@pytest.fixture(scope="session")
def sampling_kernels(kernel_library):
    """C kernels of the sampling plans (draft-to-verify and its hybrid form draft-to-verify-linear,
    verify-to-draft-sampled, context-kv-sampled) at widths 3 and 4, bt8, bs16: the sampled-verification engine
    tests (MTP and the block drafts, over the dense and the hybrid target).

    On a GPU machine without TileLang, SPECGEN_TEST_SAMPLING_KERNELS names a prebuilt folder
    (specgen build --target c,cuda --widths 3,4 --block-table-widths 8 --block-sizes 16 --draft-dtypes int32
    --boundary draft-to-verify,draft-to-verify-linear,verify-to-draft-sampled,context-kv-sampled
    --families spec_verify_head_update,spec_verify_hybrid_head_update,spec_verify_linear_state_update,
    spec_verify_token_update,spec_verify_metadata_update,spec_verify_attention_tiling_update,spec_rejection_verify,
    prepare_next_draft,context_kv_update,prepare_next_block,spec_rejection_tail_update,spec_rejection_context_tail_update,
    spec_verify_guard_check,spec_target_sample,spec_target_sample_dense,spec_draft_sample,spec_target_sample_tiles,
    spec_target_sample_dense_tiles --out build/sampling_test_kernels).
    """
    return kernel_library("SPECGEN_TEST_SAMPLING_KERNELS", SAMPLING_LAYOUT, SAMPLING_BOUNDARIES, SAMPLING_FAMILIES)
