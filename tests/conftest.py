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
