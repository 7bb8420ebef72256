"""A CUDA backend asked of a torch that has no CUDA is a clear error, not torch's assertion at the first call."""

from __future__ import annotations

import pytest
import torch

from specgen.runtime import BackendUnavailable, SpeculativeVerifyCapabilities, SpecVerifyRuntime
from specgen.runtime.device import DeviceAPI

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a torch that cannot run CUDA")


def test_device_api_for_cuda_without_cuda_says_so():
    message = "sees no CUDA device" if torch.backends.cuda.is_built() else "CUDA is not available in this torch build"
    with pytest.raises(BackendUnavailable, match=message) as err:
        DeviceAPI("cuda")
    assert "backend='cpu'" in str(err.value) and isinstance(err.value, RuntimeError)


@pytest.mark.skipif(torch.backends.cuda.is_built(), reason="needs a CPU-only torch build")
@pytest.mark.parametrize("allow_eager", [False, True])
def test_a_cuda_runtime_on_a_cpu_only_torch_names_the_cause(token_lib, allow_eager):
    with pytest.raises(
        BackendUnavailable, match=r"CUDA is not available in this torch build \(torch .* without CUDA\)"
    ):
        SpecVerifyRuntime(
            token_lib,
            lambda inputs: None,
            SpeculativeVerifyCapabilities(),
            width=4,
            backend="cuda",
            allow_eager=allow_eager,
        )
