"""The lowerings of a GEMM nest onto matrix units, and the configuration each multiplies with.

| lowering | operands | accumulate | promise |
| --- | --- | --- | --- |
| ``Int32_byte_planes`` | int32 as four unsigned byte planes, ten plane products | s32, wrapping | bit-identical modulo 2^32 |
| ``F16_operands`` | f16 (or f32 rounded to f16) | f32 | the matrix unit's arithmetic |
| ``Bf16_operands`` | f32 rounded to bf16 | f32 | the matrix unit's arithmetic |
| ``Bf16x3_operands`` | f32 as three bf16 terms, six products | f32 | close to f32 |
| ``Int8_operands`` | i8 or u8, as written | s32, wrapping | bit-identical modulo 2^32 |

``select(gemm, precision)`` picks one for a recognized nest; ``config_of(lowering, operand_elt,
frag)`` gives the cooperative-matrix configuration the device gate checks.
"""  # noqa: E501

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import Literal

from sarek.coopmat import Component, Config, Scope, Shape
from sarek.errors import SarekError
from sarek.ir import ElemType
from sarek.matrix_pattern import Gemm

SUPPORTED_SUBGROUP = (32, 64)
SUPPORTED_FRAGMENT = (16, 8)
# Bf16x3's running sums take a total every CHUNK of k: 8 sub-steps of 16, a multiple of every
# step a Bf16x3 schedule takes (16, 32 and 64; a 48-deep step is refused), so every schedule
# adds at the same k. Reductions no deeper than CHUNK are one chunk: they take the
# exact hi·hi sub-steps instead (``Scheme.exact_top``, ``scheme_for``).
CHUNK = 128


class LoweringError(SarekError):
    """No lowering fits the request; ``reason`` says why."""


class Lowering(Enum):
    """How the operands reach the matrix unit; each value is the lowering's name as the CLI,
    the reports and the rewritten kernels' names spell it."""

    INT32_BYTE_PLANES = "Int32_byte_planes"
    F16_OPERANDS = "F16_operands"
    BF16_OPERANDS = "Bf16_operands"
    BF16X3_OPERANDS = "Bf16x3_operands"
    INT8_OPERANDS = "Int8_operands"

    def __str__(self) -> str:
        return self.value


# --------------------------------------------------------------------------- staging and products


@dataclass(frozen=True)
class Scheme:
    """How one lowering stages operands and which products it accumulates where (the
    rewrite builds its staging and its multiply-adds from this)."""

    operand: ElemType  # the fragment component type
    terms: tuple[str, ...]  # staged arrays per operand (split terms or byte planes)
    # (a term, b term, accumulator index), in the order they are multiplied each step
    products: tuple[tuple[int, int, int], ...]
    accumulators: int  # per output fragment
    acc: ElemType
    # Each sub-step's products summed in a fresh accumulator, then added to the running one
    # with round to nearest (FragAdd): a tensor core truncates every multiply-accumulate at the
    # addend's magnitude, so chaining many products into one growing sum biases it with K.
    step_sums: bool = False
    # With ``step_sums``, the running sums in two levels: every ``chunk`` of k (a multiple of
    # every schedule's step, so every schedule adds at the same k) the running accumulator is
    # added to a total that started at -0.0 and starts again at -0.0; the reduction's end adds
    # the two. A sequential f32 sum of K/16 sub-step sums grows its error with K; in two levels
    # it is K/chunk + chunk/16 roundings deep.
    chunk: int | None = None
    # With ``step_sums``, the sub-step's largest product (the last of ``products``: hi·hi)
    # taken exactly: multiplied from -0.0 into a second fresh accumulator (``top``), then
    # again onto the negation of that result, which leaves exactly what the first
    # multiply-accumulate truncated away; the smaller products follow onto it, and the two
    # fresh sums are added with rounding to nearest before the running add. One product more
    # per sub-step, and one fresh accumulator more per fresh one.
    exact_top: bool = False
    # Outputs whose sum is not finite or reaches 2^127 in magnitude are recomputed by the
    # original's own loop: split terms of an infinite or NaN operand (inf - inf) and products
    # near the overflow threshold would otherwise give NaN where the original gives inf.
    original_beyond: float | None = None
    # The byte planes stacked along k (``STACKED_PLANES``): one u8 product per k of the
    # stacked operands, in phases whose sums are shifted 8 bits apart.
    stacked: bool = False


SCHEMES = {
    Lowering.F16_OPERANDS: Scheme(ElemType.F16, ("",), ((0, 0, 0),), 1, ElemType.F32),
    Lowering.BF16_OPERANDS: Scheme(ElemType.BF16, ("",), ((0, 0, 0),), 1, ElemType.F32),
    # Smallest terms first: mid*mid, lo*hi, hi*lo, mid*hi, hi*mid, hi*hi (terms: hi, mid, lo).
    Lowering.BF16X3_OPERANDS: Scheme(
        ElemType.BF16, ("hi", "mid", "lo"),
        ((1, 1, 0), (2, 0, 0), (0, 2, 0), (1, 0, 0), (0, 1, 0), (0, 0, 0)), 1, ElemType.F32,
        step_sums=True, chunk=CHUNK, original_beyond=2.0**127),
    # Byte planes p, q with p + q <= 3; accumulator p + q carries the shift 8 * (p + q).
    Lowering.INT32_BYTE_PLANES: Scheme(
        ElemType.U8, ("p0", "p1", "p2", "p3"),
        tuple((p, s - p, s) for s in range(4) for p in range(s + 1)), 4, ElemType.I32),
    # i8 or u8 as written (``scheme_for`` puts the operands' own type here)
    Lowering.INT8_OPERANDS: Scheme(ElemType.I8, ("",), ((0, 0, 0),), 1, ElemType.I32),
}


def _stacked_blocks() -> tuple[tuple[tuple[int, int], ...], ...]:
    """The byte planes' products by phase: shift class 3 first, then 2, 1 and 0, each with the
    (A plane, B plane) pairs of the class in the order ``Int32_byte_planes`` multiplies them."""
    products = SCHEMES[Lowering.INT32_BYTE_PLANES].products
    return tuple(tuple((p, q) for p, q, s in products if s == shift)
                 for shift in range(3, -1, -1))


PLANE_PHASES = _stacked_blocks()
"""The byte planes stacked along k: phase ``i`` multiplies the blocks of its (A plane, B
plane) pairs, ``((0, 3), (1, 2), (2, 1), (3, 0))`` for shift class 3 down to ``((0, 0),)``
for class 0; ten blocks in all, each the reduction's depth rounded up to
``PLANE_ALIGN``."""
PLANE_ALIGN = 16
"""Elements (bytes) each block of the stacked planes is rounded up to, zero past the
reduction's depth: whole 16-byte copies and 32-deep multiplies never mix real elements of two
blocks with anything but zeros."""
STACKED_PLANES = Scheme(ElemType.U8, ("",), ((0, 0, 0),), 1, ElemType.I32, stacked=True)
"""The byte planes after the pre-pass (``sarek.rewrite.prepass``) has split each int32
operand into its planes and stacked them along k as ``PLANE_PHASES`` orders them: a wrapping
u8 x u8 + s32 GEMM over each phase's blocks in turn into one accumulator, shifted left by 8
bits between phases (Horner's rule: ``((S3 << 8 + S2) << 8 + S1) << 8 + S0``, modulo 2^32 the
byte planes' ``sum_s S_s << 8s``). The same ten products, each exact; wrapping addition and
shifts modulo 2^32 give the bits of every other order."""


WHOLE_INT32 = Scheme(ElemType.I32, ("",), ((0, 0, 0),), 1, ElemType.I32)
"""The byte planes where a target multiplies 32-bit integers itself: the int32 words staged as
they are, one wrapping product each. The ten plane products of ``a * b`` sum to ``a * b``
modulo 2^32, and wrapping addition is associative, so every output has the same bits."""


def scheme_for(lowering: Lowering, operand_elt: ElemType, whole_int32: bool = False,
               depth: int | None = None) -> Scheme:
    """How ``lowering`` stages and multiplies operands of ``operand_elt``: its scheme, with the
    operands' own type as the fragment component where the lowering takes them as written;
    ``WHOLE_INT32`` for the byte planes on a target that multiplies int32 words whole
    (``sarek.staging.Staging.whole_int32``). Where the reduction's ``depth`` is known and at
    most ``CHUNK``, Bf16x3's sub-steps take hi·hi exactly (``Scheme.exact_top``) and its one
    chunk needs no totals."""
    if whole_int32 and lowering is Lowering.INT32_BYTE_PLANES:
        return WHOLE_INT32
    scheme = SCHEMES[lowering]
    if lowering is Lowering.INT8_OPERANDS:
        return replace(scheme, operand=operand_elt)
    if lowering is Lowering.BF16X3_OPERANDS and depth is not None and depth <= CHUNK:
        return replace(scheme, exact_top=True, chunk=None)
    return scheme


def lowering_name(lowering: Lowering) -> str:
    """The lowering's name as the design and the reports write it (``F16_operands``)."""
    return lowering.value


_OPERANDS: dict[Lowering, tuple[ElemType, ...]] = {
    Lowering.INT32_BYTE_PLANES: (ElemType.I32,),
    Lowering.F16_OPERANDS: (ElemType.F16, ElemType.F32),
    Lowering.BF16_OPERANDS: (ElemType.BF16, ElemType.F32),
    Lowering.BF16X3_OPERANDS: (ElemType.F32,),
    Lowering.INT8_OPERANDS: (ElemType.I8, ElemType.U8),
}

_COMPONENTS: dict[Lowering, tuple[Component, Component]] = {
    Lowering.INT32_BYTE_PLANES: (Component.U8, Component.S32),
    Lowering.F16_OPERANDS: (Component.F16, Component.F32),
    Lowering.BF16_OPERANDS: (Component.BF16, Component.F32),
    Lowering.BF16X3_OPERANDS: (Component.BF16, Component.F32),
    Lowering.INT8_OPERANDS: (Component.S8, Component.S32),  # u8 operands: U8 (config_of)
}


def config_of(lowering: Lowering, operand_elt: ElemType, frag: int = 16, k: int | None = None,
              whole_int32: bool = False) -> Config:
    """The configuration ``lowering`` multiplies with: ``frag x frag x k`` (``k`` is ``frag``
    unless given: a target's deeper 8-bit multiply-accumulate) at subgroup scope, operand and
    accumulator components as the lowering's table says (s32 operands for the byte planes
    multiplied whole, ``WHOLE_INT32``). Raises ``LoweringError`` when ``frag`` has no template
    or the lowering does not take ``operand_elt`` operands."""
    if frag not in SUPPORTED_FRAGMENT:
        raise LoweringError(f"fragment {frag} has no template; supported: "
                            f"{', '.join(map(str, SUPPORTED_FRAGMENT))}")
    if operand_elt not in _OPERANDS[lowering]:
        takes = " or ".join(str(t) for t in _OPERANDS[lowering])
        raise LoweringError(f"{lowering} takes {takes} operands, not {operand_elt}")
    op, acc = _COMPONENTS[lowering]
    if whole_int32 and lowering is Lowering.INT32_BYTE_PLANES:
        op = Component.S32
    if lowering is Lowering.INT8_OPERANDS and operand_elt is ElemType.U8:
        op = Component.U8
    return Config(Shape(frag, frag, k or frag), op, op, acc, acc, Scope.SUBGROUP, False)


def select(gemm: Gemm, precision: Literal["accurate", "fast"] = "accurate") -> Lowering:
    """The lowering for a recognized nest: i8 and u8 operands with an i32 accumulator take
    ``Int8_operands``; int32 operands with an i32 accumulator take the byte planes; f16
    operands ``F16_operands``; bf16 ``Bf16_operands``; f32 ``Bf16x3_operands`` when
    ``precision`` is ``"accurate"`` and ``Bf16_operands`` when ``"fast"`` (f32 accumulators
    in every float case). Anything else raises ``LoweringError``."""
    if precision not in ("accurate", "fast"):
        raise LoweringError(f"precision must be 'accurate' or 'fast', not {precision!r}")
    elt, acc = gemm.operand_elt, gemm.acc_type
    if elt in (ElemType.I8, ElemType.U8):
        if acc is not ElemType.I32:
            raise LoweringError(f"{elt} operands with a {acc} accumulator: integer matrix "
                                "units accumulate in wrapping i32 (write the sum as i32)")
        return Lowering.INT8_OPERANDS
    if elt is ElemType.I32:
        if acc is not ElemType.I32:
            raise LoweringError(f"int32 operands with a {acc} accumulator: the byte-plane "
                                "lowering accumulates in wrapping i32")
        return Lowering.INT32_BYTE_PLANES
    if elt not in (ElemType.F16, ElemType.BF16, ElemType.F32):
        raise LoweringError(f"no lowering takes {elt} operands (i8, u8, i32, f16, bf16 and "
                            "f32 do)")
    if acc is not ElemType.F32:
        raise LoweringError(f"{elt} operands with a {acc} accumulator: matrix units accumulate "
                            "in f32")
    if elt is ElemType.F16:
        return Lowering.F16_OPERANDS
    if elt is ElemType.BF16 or precision == "fast":
        return Lowering.BF16_OPERANDS
    return Lowering.BF16X3_OPERANDS


def lowerings_taking(operand_elt: ElemType) -> tuple[Lowering, ...]:
    """The lowerings that take ``operand_elt`` operands, the one ``select`` picks first."""
    order = (Lowering.INT8_OPERANDS, Lowering.INT32_BYTE_PLANES, Lowering.BF16X3_OPERANDS,
             Lowering.BF16_OPERANDS, Lowering.F16_OPERANDS)
    return tuple(low for low in order if operand_elt in _OPERANDS[low])
