"""What each kind of device multiplies, for the gate (``sarek.coopmat.verdict``): tables
derived from a documented hardware generation (CUDA compute capability, Metal GPU family), the
list the H200 reported through Vulkan (recorded, so that the gate is consulted without the
GPU), the portable emulation's everything and an unprobed device's nothing known. Reading a
live Vulkan device's list is ``backends.spirv.probe``'s."""

from __future__ import annotations

from sarek.coopmat import Component, Config, DeviceSupport, Shape, component_of


def portable_opencl() -> DeviceSupport:
    """The portable OpenCL subgroup emulation: every configuration (it multiplies in
    software, in local memory)."""
    return DeviceSupport("the portable OpenCL emulation", universal=True,
                         note="software emulation in local memory")


def unprobed(device: str) -> DeviceSupport:
    """A device whose cooperative-matrix support nobody has read."""
    return DeviceSupport(device, None)


_C = Component


def _cfg(m: int, n: int, k: int, a: Component, b: Component, c: Component,
         r: Component) -> Config:
    return Config(Shape(m, n, k), a, b, c, r)


def cuda_support(major: int, minor: int = 0) -> DeviceSupport:
    """An NVIDIA GPU of compute capability ``major.minor`` through the CUDA backend.

    The backend builds a 16x16x16 fragment from two ``mma.sync.aligned.m16n8k16`` instructions
    (PTX ISA 7.0 and later, sm_80 and later), and a 16x16x32 one of 8-bit operands from two
    ``m16n8k32``; the configurations are exactly the instruction forms the backend prints
    (``sarek.atoms.MMA``): f16 x f16 + f32, bf16 x bf16 + f32, u8 x u8 + s32 and s8 x s8 + s32
    (the 8-bit ones 16 and 32 deep). The hardware has more (f16 accumulators, mixed u8/s8
    operands) that the backend does not print, so they are not offered. Older GPUs have m16n8k8
    (f16, sm_75), m8n8k16 (integers, sm_75) and m8n8k4 (sm_70), which the backend does not use;
    no 8x8x8 float shape exists.
    """
    from sarek import atoms

    device = f"CUDA sm_{major}{minor}"
    if (major, minor) < (8, 0):
        return DeviceSupport(device, frozenset(), note="compute capability",
                             unsupported_reason=f"the CUDA backend multiplies with "
                             f"mma.sync m16n8k16, which needs sm_80; this GPU is "
                             f"sm_{major}{minor}")
    configs = set()
    for facts in atoms.MMA.values():
        operand, acc = (component_of(t) for t in (facts.operand, facts.accumulator))
        # two m16n8 instructions side by side make one 16x16 fragment
        configs.add(_cfg(facts.m, 2 * facts.n, facts.k, operand, operand, acc, acc))
    return DeviceSupport(device, frozenset(configs), note="compute capability (PTX ISA)")


def metal_support(family: int, msl: tuple[int, int] = (3, 1)) -> DeviceSupport:
    """An Apple GPU of family ``Apple{family}`` with Metal Shading Language ``msl``.

    ``simdgroup_matrix`` 8x8 (half and float, a half x half + float product included) needs
    MSL 2.3 and an Apple7 GPU (A14, M1) or later. bfloat simdgroup matrices need MSL 3.1; this
    module assumes they run on every Apple7-or-later GPU with MSL 3.1 (an assumption, not a
    measurement). Metal has no integer simdgroup matrices and no 16x16 fragment.
    """
    device = f"Metal Apple{family} (MSL {msl[0]}.{msl[1]})"
    if family < 7 or msl < (2, 3):
        return DeviceSupport(device, frozenset(), note="GPU family",
                             unsupported_reason="simdgroup matrices need an Apple7 GPU and "
                             "MSL 2.3")
    configs = {
        _cfg(8, 8, 8, _C.F16, _C.F16, _C.F16, _C.F16),
        _cfg(8, 8, 8, _C.F16, _C.F16, _C.F32, _C.F32),
        _cfg(8, 8, 8, _C.F32, _C.F32, _C.F32, _C.F32),
    }
    if msl >= (3, 1):
        configs.add(_cfg(8, 8, 8, _C.BF16, _C.BF16, _C.F32, _C.F32))
    return DeviceSupport(device, frozenset(configs), note="GPU family")


H200_VULKAN: tuple[tuple[int, int, int, str, str, str, str], ...] = (
    (16, 16, 16, "f16", "f16", "f16", "f16"), (16, 16, 16, "f16", "f16", "f32", "f32"),
    (16, 8, 16, "f16", "f16", "f16", "f16"), (16, 8, 16, "f16", "f16", "f32", "f32"),
    (16, 8, 8, "f16", "f16", "f16", "f16"), (16, 8, 8, "f16", "f16", "f32", "f32"),
    (16, 16, 32, "u8", "u8", "u32", "u32"), (16, 8, 32, "u8", "u8", "u32", "u32"),
    (16, 16, 32, "s8", "s8", "s32", "s32"), (16, 8, 32, "s8", "s8", "s32", "s32"),
    (16, 16, 16, "bf16", "bf16", "f32", "f32"),
)
"""The cooperative-matrix list the H200 reported through Vulkan (driver 580), subgroup scope,
as (m, n, k, a, b, c, result); recorded, so that the gate can be consulted without the GPU."""


def recorded_h200_vulkan() -> DeviceSupport:
    """The H200's Vulkan list as recorded (``H200_VULKAN``)."""
    configs = frozenset(_cfg(m, n, k, *(Component(x) for x in t))
                        for m, n, k, *t in H200_VULKAN)
    return DeviceSupport("NVIDIA H200 (Vulkan, driver 580, recorded)", configs,
                         note="recorded vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR")
