import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The tiny model's ops are far too small for intra-op threads to pay off."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
