"""Whether a lowered CUDA kernel runs on the device that is to launch it.

CUDA's staging policy is the H200's: its large schedules multiply on ``wgmma``, which only
``sm_90a`` has, and ask for up to 227 KiB of shared memory a block, which only sm_90 gives.
The launch path asks the device it launches on (``current``) and, where that device would
refuse the policy's kernel, takes the policy's next schedule for the lowering that it runs
(``backends.pipeline.compile_launch``'s ``refusal``), down to the seed's.
"""

from __future__ import annotations

from dataclasses import dataclass

from backends.cuda.shared import dynamic_bytes
from sarek import ir
from sarek.ir_walk import walk

WGMMA_ARCHS = ("sm_90", "sm_90a")
"""The architectures with ``wgmma`` (NVRTC builds ``sm_90a`` code for an sm_90 device)."""


@dataclass(frozen=True)
class Device:
    """What a CUDA device gives a kernel: its architecture (``sm_XY``) and the most shared
    memory one block may opt in to, in bytes."""

    arch: str
    shared_bytes: int

    def refusal(self, lowered: ir.Kernel) -> str | None:
        """Why this device cannot run ``lowered`` (CUDA's lowered kernel), or None."""
        if self.arch not in WGMMA_ARCHS and any(isinstance(s, ir.Wgmma)
                                                for s in walk(lowered.body)):
            return (f"kernel {lowered.name!r} multiplies with wgmma, which {self.arch} does "
                    "not have (sm_90 does)")
        need = dynamic_bytes(lowered)
        if need > self.shared_bytes:
            return (f"kernel {lowered.name!r} needs {need} bytes of shared memory a block; "
                    f"this {self.arch} device gives at most {self.shared_bytes}")
        return None


def current(device: int = 0) -> Device:
    """The CUDA device ``device`` as ``Device`` (through the driver API)."""
    from cuda.bindings import driver as cu

    from backends.cuda.run import _check, device_arch

    arch = device_arch(device)
    dev = _check(cu.cuDeviceGet(device), "cuDeviceGet")
    optin = cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
    return Device(arch, int(_check(cu.cuDeviceGetAttribute(optin, dev),
                                   "cuDeviceGetAttribute")))
