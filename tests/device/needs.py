"""The skip marks of the device checks: each names what is missing (the device, its driver, the
Python package that reaches it) as the backend says it."""

from __future__ import annotations

import pytest

from backends.cuda.run import device_arch, unavailable_reason
from backends.opencl.run import NVIDIA, opencl_available
from backends.spirv.device import unavailable_reason as vulkan_reason


def _hopper_reason() -> str | None:
    """None on a CUDA device of compute capability 9.x (``wgmma``, ``stmatrix``)."""
    reason = unavailable_reason()
    if reason is not None:
        return f"no CUDA device: {reason}"
    arch = device_arch()
    return None if arch.startswith("sm_9") else f"the CUDA device is {arch}, not Hopper (sm_90)"


def _vulkan_matrices_reason() -> str | None:
    """None on a Vulkan device with cooperative matrices (lavapipe has none)."""
    if _VULKAN is not None:
        return f"no Vulkan device: {_VULKAN}"
    from backends.spirv.device import device

    d = device()
    return None if d.features.get("cooperativeMatrix") else (
        f"the Vulkan device, {d.name}, has no cooperative matrices")


_CUDA = unavailable_reason()
_VULKAN = vulkan_reason()
VULKAN_MATRICES = _vulkan_matrices_reason()
_OPENCL_NV = opencl_available(NVIDIA)
_HOPPER = _hopper_reason()

cuda = pytest.mark.skipif(_CUDA is not None, reason=f"no CUDA device: {_CUDA}")
hopper = pytest.mark.skipif(_HOPPER is not None, reason=str(_HOPPER))
vulkan = pytest.mark.skipif(_VULKAN is not None, reason=f"no Vulkan device: {_VULKAN}")
vulkan_matrices = pytest.mark.skipif(VULKAN_MATRICES is not None, reason=str(VULKAN_MATRICES))
opencl_nv = pytest.mark.skipif(_OPENCL_NV is not None,
                               reason=str(_OPENCL_NV))
