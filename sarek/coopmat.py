"""Cooperative-matrix configurations and the device gate.

A ``Config`` is one matrix multiply-accumulate a matrix unit performs: ``D = A * B + C`` with
A of ``m x k``, B of ``k x n`` and C, D of ``m x n`` (``Shape``), each with a component type,
at a scope (subgroup), saturating or not. A ``DeviceSupport`` says which configurations a device
runs: a list read from the device (Vulkan's ``vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR``),
a list derived from a documented hardware generation (CUDA compute capability, Metal GPU family),
everything (the portable OpenCL emulation), or nothing known (never probed); those tables are
``sarek.device_support``'s, and reading a live Vulkan device is ``backends.spirv.probe``'s.
``verdict(config, support)`` is ``Available``, ``Unavailable(reason)`` or ``Unknown(reason)``;
only ``Available`` lets a rewrite go ahead.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TypeAlias

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
    c = Component
    if (config.a, config.b, config.c, config.result) == (c.U8, c.U8, c.S32, c.S32):
        return replace(config, c=c.U32, result=c.U32)
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


def component_of(elem: ElemType) -> Component:
    """The component type of fragments of IR element type ``elem``; ``GateError`` for a type
    no matrix unit takes."""
    names = {ElemType.F16: Component.F16, ElemType.BF16: Component.BF16,
             ElemType.F32: Component.F32, ElemType.U8: Component.U8, ElemType.I8: Component.S8,
             ElemType.U32: Component.U32, ElemType.I32: Component.S32}
    if elem not in names:
        raise GateError(f"no matrix unit has {elem} components")
    return names[elem]
