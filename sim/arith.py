"""Scalar arithmetic of the IR on NumPy values, bit-exact (``specs/simulator.md``).

A value is a NumPy array of one element per invocation or a NumPy scalar when every invocation
holds the same value; both always have the exact dtype of their IR type, so NumPy's own
arithmetic wraps integers and rounds f32/f64 once per operation. What NumPy does not do the
IR's way is here: C division, saturating float-to-int casts, conversions that must round once
(f64 and 64-bit integers to bf16 or f32), ``fma`` and the IEEE 754-2019 ``min``/``max``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any, TypeAlias

import numpy as np

from sarek.dtypes import NUMPY_DTYPES, int_range
from sarek.ir import BinOp, ElemType, MathFn, UnOp

Value: TypeAlias = Any  # np.ndarray of shape (invocations,) or np.generic; see the module doc

def canary(t: ElemType) -> np.generic:
    """The value fresh shared and local arrays are filled with: NaN for floats, True for bool,
    the byte 0x5A repeated for integers (0x5A5A5A5A = 1515870810 for i32 and u32)."""
    if t is ElemType.BOOL:
        return np.True_
    value: np.generic = NUMPY_DTYPES[t].type(
        np.nan if t.is_float else int.from_bytes(b"\x5a" * (t.bits // 8), "little"))
    return value


def scalar(x: Any) -> Value:
    """``x`` with 0-d arrays turned into NumPy scalars (NumPy returns 0-d arrays from some
    functions applied to scalars); arrays of invocations are returned as they are."""
    return x[()] if isinstance(x, np.ndarray) else x


# --------------------------------------------------------------------------- conversions


def convert(x: Value, src: ElemType, dst: ElemType) -> Value:
    """``Cast`` from ``src`` to ``dst``: integers wrap, floats round to nearest even once,
    floats to integers truncate toward zero and saturate (NaN gives 0), to bool is ``!= 0``,
    bool to a number is 0 or 1."""
    if src is dst:
        return x
    if dst is ElemType.BOOL:
        return scalar(np.not_equal(_widen(x, src), 0))
    if src is ElemType.BOOL or (src.is_int and dst.is_int):
        return x.astype(NUMPY_DTYPES[dst])
    if dst.is_int:
        return _float_to_int(x, src, dst)
    if src in _WIDENS_TO_F32 and dst is not ElemType.F64:
        # f16, bf16 and f32 hold exactly in f32, and NumPy / ml_dtypes round f32 once.
        return x.astype(np.float32).astype(NUMPY_DTYPES[dst])
    wide = _round_to_f64(x, src, odd=dst is not ElemType.F64)
    if dst is ElemType.BF16:
        # ml_dtypes converts f64 through f32 (two roundings): round to odd in f32 first.
        return _round_to_odd_f32(wide).astype(NUMPY_DTYPES[dst])
    return wide.astype(NUMPY_DTYPES[dst])


_WIDENS_TO_F32 = frozenset({ElemType.F16, ElemType.BF16, ElemType.F32})


def reinterpret(x: Value, dt: np.dtype[Any]) -> Value:
    """The bits of ``x`` read as ``dt`` (of the same width)."""
    out = np.asarray(x).view(dt)
    return out if isinstance(x, np.ndarray) else out[()]


def _widen(x: Value, src: ElemType) -> Value:
    return x.astype(np.float32) if src.is_storage_only else x


def _float_to_int(x: Value, src: ElemType, dst: ElemType) -> Value:
    t = np.trunc(np.asarray(x, dtype=np.float64))  # every float type widens to f64 exactly
    lo, hi = int_range(dst)
    over = t >= float(hi + 1)  # hi + 1 and lo are powers of two, exact in f64
    under = t < float(lo)
    dt = NUMPY_DTYPES[dst]
    exact = np.where(over | under | np.isnan(t), 0.0, t).astype(dt)
    out = np.where(over, dt.type(hi), np.where(under, dt.type(lo), exact))
    return scalar(out)


def _round_to_f64(x: Value, src: ElemType, *, odd: bool) -> Value:
    """``x`` (f64 or an integer) as f64, rounded to nearest even or, with ``odd``, to odd: the
    nearest-even rounding of a round-to-odd f64 to any narrower float is the correctly
    rounded value, so a later conversion rounds only once."""
    if src is ElemType.F64 or src.bits <= 32:
        return x.astype(np.float64)  # exact
    a = np.asarray(x)
    high_mask = a.dtype.type(0xFFFFFFFF00000000 if src is ElemType.U64 else -(1 << 32))
    high = (a & high_mask).astype(np.float64)  # at most 32 significant bits: exact
    low = (a & a.dtype.type(0xFFFFFFFF)).astype(np.float64)
    s, err = _two_sum(high, low)
    return scalar(_to_odd(s, err) if odd else s)


def _round_to_odd_f32(wide: Value) -> Value:
    narrow = np.asarray(wide).astype(np.float32)
    err = np.asarray(wide) - narrow.astype(np.float64)
    even = (narrow.view(np.uint32) & 1) == 0
    fix = (err != 0) & even & np.isfinite(narrow)
    if not fix.any():
        return scalar(narrow)
    step = np.nextafter(narrow, np.where(err > 0, np.float32(np.inf), np.float32(-np.inf)))
    return scalar(np.where(fix, step, narrow))


def _two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``s = fl(a + b)`` and the exact error ``a + b - s`` (Knuth's TwoSum)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _to_odd(s: np.ndarray, err: np.ndarray) -> np.ndarray:
    """Rounds ``s + err`` (``s`` its nearest f64) to odd: where the sum is inexact and ``s``
    has an even significand, ``s`` steps one ulp toward ``err``."""
    fix = (err != 0) & ((s.view(np.int64) & 1) == 0) & np.isfinite(s)
    if not fix.any():
        return s
    return np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)


def constant(value: bool | int | float, t: ElemType) -> np.generic:
    """The NumPy scalar of a ``Const``; float literals round once to the type. Raises
    ValueError when an integer constant does not fit."""
    if t is ElemType.BOOL:
        return np.bool_(value)
    if t.is_int:
        lo, hi = int_range(t)
        if isinstance(value, float) or not lo <= value <= hi:
            raise ValueError(f"constant {value!r} does not fit {t} [{lo}, {hi}]")
        integer: np.generic = NUMPY_DTYPES[t].type(value)
        return integer
    result: np.generic = convert(np.float64(value), ElemType.F64, t)
    return result


# --------------------------------------------------------------------------- operators


def int_div(a: Value, b: Value) -> Value:
    """C division: the quotient truncated toward zero; ``MIN / -1`` wraps to ``MIN``. The
    caller has checked ``b != 0`` where it matters (elsewhere the result is 0)."""
    if a.dtype.kind == "u":
        return np.floor_divide(a, b)
    # a - rem(a, b) is an exact multiple of b, so floor division of it truncates.
    return np.floor_divide(a - np.fmod(a, b), b)


def shift_amount_ok(amount: Value, t: ElemType) -> Value:
    """Whether each shift amount lies in [0, bits of ``t``)."""
    return (amount >= 0) & (amount < t.bits)


def shl(a: Value, amount: Value) -> Value:
    return np.left_shift(a, amount.astype(a.dtype))


def shr(a: Value, amount: Value) -> Value:
    """Arithmetic for signed types, logical for unsigned (NumPy's rule)."""
    return np.right_shift(a, amount.astype(a.dtype))


UNARY: dict[UnOp, Callable[[Value], Value]] = {
    UnOp.NEG: np.negative, UnOp.NOT: np.logical_not, UnOp.BITNOT: np.invert,
}

SIMPLE_BINARY: dict[BinOp, np.ufunc] = {
    BinOp.ADD: np.add, BinOp.SUB: np.subtract, BinOp.MUL: np.multiply,
    BinOp.AND: np.bitwise_and, BinOp.OR: np.bitwise_or, BinOp.XOR: np.bitwise_xor,
    BinOp.LT: np.less, BinOp.LE: np.less_equal, BinOp.GT: np.greater,
    BinOp.GE: np.greater_equal, BinOp.EQ: np.equal, BinOp.NE: np.not_equal,
}
"""Operators NumPy computes exactly as the IR defines them for every type they accept."""

FLOAT_BINARY: dict[BinOp, np.ufunc] = {
    BinOp.DIV: np.true_divide, BinOp.REM: np.fmod,
}
"""Float division is IEEE; float ``rem`` is C's ``fmod`` (exact, the sign of the dividend)."""


# --------------------------------------------------------------------------- math functions


def fmin(a: Value, b: Value) -> Value:
    """IEEE 754-2019 minimumNumber: a NaN loses to a number, -0 is below +0."""
    both_zero = (a == 0) & (b == 0)
    return scalar(np.where(both_zero, np.where(np.signbit(a), a, b), np.fmin(a, b)))


def fmax(a: Value, b: Value) -> Value:
    """IEEE 754-2019 maximumNumber: a NaN loses to a number, +0 is above -0."""
    both_zero = (a == 0) & (b == 0)
    return scalar(np.where(both_zero, np.where(np.signbit(a), b, a), np.fmax(a, b)))


def fma_f32(a: Value, b: Value, c: Value) -> Value:
    """``a*b + c`` on f32 rounded once. The product of two f32 is exact in f64; TwoSum gives
    the f64 sum and its error; rounding that sum to odd keeps the information a second
    rounding needs, so converting it to f32 is the correctly rounded result."""
    p = np.asarray(a, np.float64) * np.asarray(b, np.float64)
    s, err = _two_sum(p, np.asarray(c, np.float64))
    return scalar(_to_odd(np.asarray(s), np.asarray(err)).astype(np.float32))


def fma_f64(a: Value, b: Value, c: Value, lanes: np.ndarray | None) -> Value:
    """``a*b + c`` on f64 rounded once, computed exactly with ``Fraction`` for each element
    (``lanes``: the ones that matter, None for all; the others are left 0). Slow, and rare."""
    shape = np.broadcast(a, b, c, *(() if lanes is None else (lanes,))).shape
    av, bv, cv = (np.broadcast_to(np.asarray(x, np.float64), shape) for x in (a, b, c))
    out = np.zeros(shape, np.float64)
    where = (range(out.size) if lanes is None or not shape
             else np.flatnonzero(np.broadcast_to(lanes, shape)))
    flat_out = out.reshape(-1)
    flat = [v.reshape(-1) for v in (av, bv, cv)]
    for i in where:
        flat_out[i] = _fma_exact(float(flat[0][i]), float(flat[1][i]), float(flat[2][i]))
    return scalar(out)


def _fma_exact(a: float, b: float, c: float) -> float:
    if not all(np.isfinite((a, b, c))):
        if np.isfinite(a) and np.isfinite(b):
            return c  # an infinite or NaN addend decides alone: a*b is finite
        return a * b + c  # IEEE: NaN and infinity propagate exactly as in fma
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:
        product_negative = (np.signbit(a) != np.signbit(b)) and (a == 0 or b == 0)
        return -0.0 if product_negative and np.signbit(c) else 0.0
    try:
        return float(exact)  # int / int true division: correctly rounded
    except OverflowError:
        return math.inf if exact > 0 else -math.inf


def _via_f64(fn: Callable[[Value], Value]) -> Callable[[Value], Value]:
    def apply(x: Value) -> Value:
        return scalar(fn(np.asarray(x, np.float64)).astype(x.dtype))

    return apply


_TRANSCENDENTAL: dict[MathFn, Callable[[Value], Value]] = {
    MathFn.EXP: np.exp, MathFn.LOG: np.log, MathFn.SIN: np.sin, MathFn.COS: np.cos,
    MathFn.TANH: np.tanh,
}


def math_fn(fn: MathFn, t: ElemType) -> Callable[..., Value]:
    """The function computing ``fn`` on values of ``t`` (``fma`` on f64 excepted: it needs the
    active lanes, see ``fma_f64``)."""
    if fn is MathFn.ABS:
        return np.abs
    if fn in (MathFn.MIN, MathFn.MAX):
        if t.is_int:
            return np.minimum if fn is MathFn.MIN else np.maximum
        return fmin if fn is MathFn.MIN else fmax
    if fn is MathFn.FMA:
        return fma_f32
    if fn in _TRANSCENDENTAL:
        # f32: the f64 result rounded to f32; f64: NumPy's own (devices may differ by an ulp
        # or a few for these functions).
        f = _TRANSCENDENTAL[fn]
        return _via_f64(f) if t is ElemType.F32 else f
    return {MathFn.SQRT: np.sqrt, MathFn.FLOOR: np.floor, MathFn.CEIL: np.ceil}[fn]
