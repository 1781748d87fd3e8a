"""SPIR-V for Vulkan compute: the lowering check (``backends.spirv.lower``), the assembly
printer (``emit``), SPIRV-Tools (``assemble``, ``validate``, ``check``) and, where a Vulkan
device exists, the runner (``backends.spirv.run``)."""

from backends.spirv.emit import emit, print_kernel
from backends.spirv.tools import SpirvToolError, assemble, check, tools_reason, validate

__all__ = ["SpirvToolError", "assemble", "check", "emit", "print_kernel", "tools_reason",
           "validate"]
