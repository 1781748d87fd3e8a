"""Cooperative-matrix configurations and the device gate.

A ``Config`` is one matrix multiply-accumulate a matrix unit performs: ``D = A * B + C`` with
A of ``m x k``, B of ``k x n`` and C, D of ``m x n`` (``Shape``), each with a component type,
at a scope (subgroup), saturating or not. A ``DeviceSupport`` says which configurations a device
runs: a list read from the device (Vulkan's ``vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR``),
a list derived from a documented hardware generation (CUDA compute capability, Metal GPU family),
everything (the portable OpenCL emulation), or nothing known (never probed).
``verdict(config, support)`` is ``Available``, ``Unavailable(reason)`` or ``Unknown(reason)``;
only ``Available`` lets a rewrite go ahead.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, TypeAlias

from sarek import ir
from sarek.errors import SarekError
from sarek.ir import ElemType
from sarek.ir_walk import walk


class Component(StrEnum):
    """Component (element) types of a fragment."""

    F16 = "f16"
    BF16 = "bf16"
    F32 = "f32"
    U8 = "u8"
    S8 = "s8"
    U32 = "u32"
    S32 = "s32"

    @property
    def bits(self) -> int:
        return {"f16": 16, "bf16": 16, "f32": 32, "u8": 8, "s8": 8, "u32": 32, "s32": 32}[self]


class Use(StrEnum):
    """A fragment's role in ``D = A * B + C``."""

    A = "a"
    B = "b"
    ACCUMULATOR = "accumulator"


class Scope(StrEnum):
    """Which invocations own a fragment together."""

    SUBGROUP = "subgroup"
    WORKGROUP = "workgroup"


@dataclass(frozen=True)
class Shape:
    """The ``m x n x k`` of a multiply-accumulate."""

    m: int
    n: int
    k: int

    def dims(self, use: Use) -> tuple[int, int]:
        """Rows and columns of the fragment of ``use``: A is m x k, B k x n, C and D m x n."""
        match use:
            case Use.A:
                return self.m, self.k
            case Use.B:
                return self.k, self.n
            case Use.ACCUMULATOR:
                return self.m, self.n

    def __str__(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"


@dataclass(frozen=True)
class Config:
    """One multiply-accumulate configuration: ``result = a * b + c`` over ``shape``."""

    shape: Shape
    a: Component
    b: Component
    c: Component
    result: Component
    scope: Scope = Scope.SUBGROUP
    saturating: bool = False

    def component(self, use: Use) -> Component:
        """The component type of the fragment of ``use`` (the accumulator's is C's)."""
        return {Use.A: self.a, Use.B: self.b, Use.ACCUMULATOR: self.c}[use]

    def per_lane(self, use: Use, lanes: int) -> int:
        """Components of the fragment of ``use`` that each of ``lanes`` invocations holds;
        raises ``GateError`` when the fragment does not spread evenly."""
        rows, cols = self.shape.dims(use)
        total = rows * cols
        if lanes <= 0 or total % lanes:
            raise GateError(f"a {rows}x{cols} fragment ({total} components) cannot be spread "
                            f"evenly over {lanes} lanes")
        return total // lanes

    @property
    def types(self) -> str:
        """``a x b + c -> result``, for messages."""
        return f"{self.a} x {self.b} + {self.c} -> {self.result}"

    def __str__(self) -> str:
        sat = ", saturating" if self.saturating else ""
        return f"{self.shape} {self.types} ({self.scope}{sat})"


class GateError(SarekError):
    """A configuration or a support description is malformed."""


@dataclass(frozen=True)
class Available:
    """The device multiplies this configuration with its matrix unit; ``note`` says how where
    it runs as another configuration of the same bits (``same_bits``)."""

    note: str = ""

    def __bool__(self) -> bool:
        return True


@dataclass(frozen=True)
class Unavailable:
    """The device does not support the configuration; ``reason`` says what it has instead."""

    reason: str

    def __bool__(self) -> bool:
        return False


@dataclass(frozen=True)
class Unknown:
    """Nobody knows: the device's support was never probed."""

    reason: str

    def __bool__(self) -> bool:
        return False


Verdict: TypeAlias = Available | Unavailable | Unknown


@dataclass(frozen=True)
class DeviceSupport:
    """What a device runs. ``configs`` is the list of supported configurations, or None when
    support was never probed; ``universal`` marks an implementation that runs any
    configuration (an emulation). ``note`` says where the list comes from."""

    device: str
    configs: frozenset[Config] | None = None
    universal: bool = False
    note: str = ""
    unsupported_reason: str = field(default="", compare=False)



_COMPONENT_OF = {ElemType.F16: Component.F16, ElemType.BF16: Component.BF16,
                 ElemType.F32: Component.F32, ElemType.U8: Component.U8, ElemType.I8: Component.S8,
                 ElemType.U32: Component.U32, ElemType.I32: Component.S32}


def configs_of(kernel: ir.Kernel) -> frozenset[Config]:
    """The configurations the multiply-adds of ``kernel`` perform, derived from the
    declarations of their fragments (``FragMulAdd`` stores none): each one's shape, A, B and C
    components and D's as the result, at subgroup scope, not saturating. ``GateError`` names a
    fragment whose element type no matrix unit takes."""
    decls = {s.name: s for s in walk(kernel.body) if isinstance(s, ir.FragDecl)}
    out = set()
    for s in walk(kernel.body):
        if isinstance(s, ir.FragMulAdd):
            d, a, b, c = (decls[name] for name in (s.d, s.a, s.b, s.c))
            for frag in (d, a, b, c):
                if frag.elem not in _COMPONENT_OF:
                    raise GateError(f"fragment {frag.name!r} holds {frag.elem}, which no matrix "
                                    "unit multiplies")
            out.add(Config(Shape(a.shape.m, a.shape.n, a.shape.k), _COMPONENT_OF[a.elem],
                           _COMPONENT_OF[b.elem], _COMPONENT_OF[c.elem], _COMPONENT_OF[d.elem]))
    return frozenset(out)


def same_bits(config: Config) -> Config | None:
    """The other configuration whose results have exactly ``config``'s bits, if any: u8 x u8
    products accumulated in s32 are accumulated in u32 (every product is non-negative and
    below 2^16, and u32 addition wraps to the bits of s32 addition, so every sum, and the
    result read as s32, keeps its bits modulo 2^32)."""
    if (config.a, config.b, config.c, config.result) == (_C.U8, _C.U8, _C.S32, _C.S32):
        return replace(config, c=_C.U32, result=_C.U32)
    return None


def verdict(config: Config, support: DeviceSupport) -> Verdict:
    """Whether ``support``'s device runs ``config``, or another configuration of the same
    bits (``same_bits``, said in ``Available.note``); only ``Available`` permits a rewrite."""
    if support.universal:
        return Available()
    if support.configs is None:
        return Unknown(f"the cooperative-matrix support of {support.device} was never probed"
                       + (f" ({support.note})" if support.note else "")
                       + f"; {config} cannot be checked")
    if config in support.configs:
        return Available()
    alternative = same_bits(config)
    if alternative is not None and alternative in support.configs:
        return Available(f"{support.device} runs {config} as {alternative}: u8 x u8 products "
                         "are non-negative and u32 addition wraps to the bits of s32 addition, "
                         "so the results keep their bits modulo 2^32")
    head = f"{support.device} does not support {config}"
    if support.unsupported_reason:
        return Unavailable(f"{head}: {support.unsupported_reason}")
    same_types = sorted(str(c.shape) for c in support.configs
                        if (c.a, c.b, c.c, c.result) == (config.a, config.b, config.c,
                                                         config.result))
    if same_types:
        return Unavailable(f"{head}; it has {config.types} only at "
                           f"{', '.join(same_types)}")
    same_ab = sorted({f"{c.types} at {c.shape}" for c in support.configs
                      if (c.a, c.b) == (config.a, config.b)})
    if same_ab:
        return Unavailable(f"{head}; with {config.a} x {config.b} operands it has "
                           f"{', '.join(same_ab)}")
    return Unavailable(f"{head}; it has no configuration with {config.a} x {config.b} operands")


# --------------------------------------------------------------------------- descriptions


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


def component_of(elem: ElemType) -> Component:
    """The component type of fragments of IR element type ``elem``; ``GateError`` for a type
    no matrix unit takes."""
    names = {ElemType.F16: Component.F16, ElemType.BF16: Component.BF16,
             ElemType.F32: Component.F32, ElemType.U8: Component.U8, ElemType.I8: Component.S8,
             ElemType.U32: Component.U32, ElemType.I32: Component.S32}
    if elem not in names:
        raise GateError(f"no matrix unit has {elem} components")
    return names[elem]


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


# --------------------------------------------------------------------------- Vulkan

_VK_COMPONENT = {  # VkComponentTypeKHR
    0: Component.F16, 1: Component.F32, 3: Component.S8, 5: Component.S32,
    7: Component.U8, 9: Component.U32, 1000141000: Component.BF16,
}
_VK_SCOPE = {3: Scope.SUBGROUP, 2: Scope.WORKGROUP}  # VkScopeKHR


def from_vulkan_properties(device: str, props: Any) -> DeviceSupport:
    """A support description from ``VkCooperativeMatrixPropertiesKHR`` records (objects with
    ``MSize NSize KSize AType BType CType ResultType saturatingAccumulation scope``);
    component or scope codes sarek has no name for are skipped."""
    configs = set()
    for p in props:
        codes = (p.AType, p.BType, p.CType, p.ResultType)
        if not all(c in _VK_COMPONENT for c in codes) or p.scope not in _VK_SCOPE:
            continue
        a, b, c, r = (_VK_COMPONENT[x] for x in codes)
        configs.add(Config(Shape(int(p.MSize), int(p.NSize), int(p.KSize)), a, b, c, r,
                           _VK_SCOPE[p.scope], bool(p.saturatingAccumulation)))
    return DeviceSupport(device, frozenset(configs),
                         note="vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR")


def vulkan_support(instance: Any, physical_device: Any) -> DeviceSupport:
    """Reads ``vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR`` of ``physical_device``
    through the ``vulkan`` package (imported here, so that sarek runs without it). A device
    without ``VK_KHR_cooperative_matrix`` supports nothing. Needs a Vulkan driver: it runs on
    the GPU machine, not in CI."""
    try:
        import vulkan as vk
    except (ImportError, OSError) as e:
        raise GateError(f"probing Vulkan needs the 'vulkan' package and a Vulkan loader ({e})"
                        ) from None
    props = vk.vkGetPhysicalDeviceProperties(physical_device)
    name = f"{_vk_text(vk, props.deviceName)} (Vulkan)"
    exts = {_vk_text(vk, e.extensionName)
            for e in vk.vkEnumerateDeviceExtensionProperties(physical_device, None)}
    if "VK_KHR_cooperative_matrix" not in exts:
        return DeviceSupport(name, frozenset(), note="Vulkan extensions",
                             unsupported_reason="the device lacks VK_KHR_cooperative_matrix")
    query = vk.vkGetInstanceProcAddr(instance,
                                     "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR")
    return from_vulkan_properties(name, query(physical_device))


def _vk_text(vk: Any, value: Any) -> str:
    """A Vulkan string field: the ``vulkan`` package gives ``str`` (seen on the H200) or, in
    other versions, a cffi char array."""
    return value if isinstance(value, str) else str(vk.ffi.string(value).decode())


def vulkan_devices() -> list[DeviceSupport]:
    """Creates a Vulkan 1.3 instance and probes every physical device (GPU machine only)."""
    try:
        import vulkan as vk
    except (ImportError, OSError) as e:
        raise GateError(f"probing Vulkan needs the 'vulkan' package and a Vulkan loader ({e})"
                        ) from None
    app = vk.VkApplicationInfo(sType=vk.VK_STRUCTURE_TYPE_APPLICATION_INFO,
                               pApplicationName="sarek", apiVersion=vk.VK_MAKE_VERSION(1, 3, 0))
    info = vk.VkInstanceCreateInfo(sType=vk.VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                                   pApplicationInfo=app)
    instance = vk.vkCreateInstance(info, None)
    try:
        return [vulkan_support(instance, d) for d in vk.vkEnumeratePhysicalDevices(instance)]
    finally:
        vk.vkDestroyInstance(instance, None)


def named_support(name: str) -> DeviceSupport:
    """A support description by name, as the command line takes it: ``opencl`` (portable
    emulation), ``vulkan-h200`` (the recorded list), ``vulkan`` (probe the first device),
    ``cuda:8.0`` / ``cuda:sm_90``, ``metal:apple7``, ``unprobed:NAME``."""
    kind, _, rest = name.partition(":")
    try:
        match kind:
            case "opencl":
                return portable_opencl()
            case "vulkan-h200":
                return recorded_h200_vulkan()
            case "vulkan":
                devices = vulkan_devices()
                if not devices:
                    raise GateError("Vulkan reports no physical device")
                return devices[0]
            case "cuda":
                cc = rest.removeprefix("sm_")
                major, dot, minor = cc.partition(".")
                if not dot:
                    major, minor = cc[:-1], cc[-1:]
                return cuda_support(int(major), int(minor))
            case "metal":
                return metal_support(int(rest.lower().removeprefix("apple")))
            case "unprobed":
                return unprobed(rest or "the device")
    except ValueError:
        pass
    raise GateError(f"unknown target {name!r}: use opencl, vulkan-h200, vulkan, cuda:8.0 (or "
                    "cuda:sm_90), metal:apple7 or unprobed:NAME")
