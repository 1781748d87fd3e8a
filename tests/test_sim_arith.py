"""The simulator's arithmetic: integers wrap, C division, shifts, casts, rounding, fma, math.

Expected values come from Python integers, ``fractions.Fraction``, NumPy and ml_dtypes, never
from the simulator."""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from sim_helpers import (
    F32,
    F64,
    I32,
    array,
    binary,
    binary_kernel,
    call,
    cast,
    const,
    kernel,
    launch_1d,
    load,
    round_f32,
    round_f64,
    round_fraction,
    run_binary,
    run_unary,
    scalar,
    tid,
    var,
)

from sarek import ir
from sarek.errors import LaunchError
from sarek.ir import BinOp, ElemType, MathFn, UnOp

SETTINGS = settings(max_examples=30, deadline=None)

INT_TYPES = {
    ElemType.I8: np.int8, ElemType.U8: np.uint8, ElemType.I16: np.int16,
    ElemType.U16: np.uint16, ElemType.I32: np.int32, ElemType.U32: np.uint32,
    ElemType.I64: np.int64, ElemType.U64: np.uint64,
}


def int_range(t: ElemType) -> tuple[int, int]:
    bits = t.bits
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if t.is_signed else (0, (1 << bits) - 1)


def wrap(v: int, t: ElemType) -> int:
    lo, _ = int_range(t)
    return (v - lo) % (1 << t.bits) + lo


def int_lists(t: ElemType, nonzero: bool = False) -> st.SearchStrategy[list[tuple[int, int]]]:
    lo, hi = int_range(t)
    edge = st.sampled_from([lo, lo + 1, -1 if lo else 1, 0, 1, hi - 1, hi])
    value = st.one_of(st.integers(lo, hi), edge)
    second = value.filter(lambda v: v != 0) if nonzero else value
    return st.lists(st.tuples(value, second), min_size=1, max_size=40)


def columns(pairs: list[tuple[int, int]], t: ElemType) -> tuple[np.ndarray, np.ndarray]:
    dt = INT_TYPES[t]
    return np.array([a for a, _ in pairs], dt), np.array([b for _, b in pairs], dt)


# --------------------------------------------------------------------------- integers


@pytest.mark.parametrize("t", list(INT_TYPES))
@pytest.mark.parametrize("op", [BinOp.ADD, BinOp.SUB, BinOp.MUL])
@SETTINGS
@given(data=st.data())
def test_integer_arithmetic_wraps_modulo_two_to_the_bits(t: ElemType, op: BinOp,
                                                           data: st.DataObject) -> None:
    pairs = data.draw(int_lists(t))
    x, y = columns(pairs, t)
    exact = {BinOp.ADD: lambda a, b: a + b, BinOp.SUB: lambda a, b: a - b,
             BinOp.MUL: lambda a, b: a * b}[op]
    got = run_binary(op, x, y)
    assert got.dtype == INT_TYPES[t]
    assert [int(v) for v in got] == [wrap(exact(a, b), t) for a, b in pairs]


def test_i32_addition_overflow_wraps_to_the_minimum() -> None:
    got = run_binary(BinOp.ADD, np.array([2**31 - 1], np.int32), np.array([1], np.int32))
    assert got[0] == -(2**31)


def test_negation_of_unsigned_wraps() -> None:
    x = np.array([0, 1, 65535], np.uint16)
    got = run_unary(ElemType.U16, ElemType.U16,
                    ir.Unary(op=UnOp.NEG, x=var("v", ElemType.U16), type=ElemType.U16), x)
    assert list(got) == [0, 65535, 1]


def c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


@pytest.mark.parametrize("t", list(INT_TYPES))
@SETTINGS
@given(data=st.data())
def test_division_truncates_toward_zero_and_remainder_takes_the_dividend_sign(
        t: ElemType, data: st.DataObject) -> None:
    pairs = data.draw(int_lists(t, nonzero=True))
    x, y = columns(pairs, t)
    quotients = run_binary(BinOp.DIV, x, y)
    remainders = run_binary(BinOp.REM, x, y)
    assert [int(v) for v in quotients] == [wrap(c_div(a, b), t) for a, b in pairs]
    assert [int(v) for v in remainders] == [a - c_div(a, b) * b for a, b in pairs]


def test_c_division_signs() -> None:
    x = np.array([7, -7, 7, -7], np.int32)
    y = np.array([2, 2, -2, -2], np.int32)
    assert list(run_binary(BinOp.DIV, x, y)) == [3, -3, -3, 3]
    assert list(run_binary(BinOp.REM, x, y)) == [1, -1, 1, -1]


def test_minimum_divided_by_minus_one_wraps() -> None:
    x, y = np.array([-(2**31)], np.int32), np.array([-1], np.int32)
    assert run_binary(BinOp.DIV, x, y)[0] == -(2**31)
    assert run_binary(BinOp.REM, x, y)[0] == 0


def test_integer_division_by_zero_is_a_launch_error_naming_the_statement() -> None:
    x, y = np.array([4, 5, 6], np.int32), np.array([1, 0, 2], np.int32)
    with pytest.raises(LaunchError) as info:
        run_binary(BinOp.DIV, x, y)
    err = info.value
    assert err.detail == "i32 division by zero"
    assert err.statement == "body[1].then[0]"
    assert err.invocations == (((0, 0, 0), (1, 0, 0)),)


def test_division_by_zero_in_inactive_invocations_is_not_an_error() -> None:
    # Invocations 3.. are beyond n and inactive; y is 0 there.
    x, y = np.array([4, 5, 6, 7], np.int32), np.array([2, 5, 3, 0], np.int32)
    out = launch_1d(binary_kernel(BinOp.DIV, I32), [x, y, np.zeros(4, np.int32), 3])["out"]
    assert list(out) == [2, 1, 2, 0]


def test_float_division_by_zero_is_ieee() -> None:
    x = np.array([1.0, -1.0, 0.0], np.float32)
    got = run_binary(BinOp.DIV, x, np.zeros(3, np.float32))
    assert got[0] == np.inf and got[1] == -np.inf and np.isnan(got[2])


@pytest.mark.parametrize("t", list(INT_TYPES))
@SETTINGS
@given(data=st.data())
def test_shifts_match_the_c_definition(t: ElemType, data: st.DataObject) -> None:
    lo, hi = int_range(t)
    values = data.draw(st.lists(st.integers(lo, hi), min_size=1, max_size=30))
    amounts = data.draw(st.lists(st.integers(0, t.bits - 1), min_size=len(values),
                                 max_size=len(values)))
    x = np.array(values, INT_TYPES[t])
    y = np.array(amounts, np.int32)
    left = run_binary(BinOp.SHL, x, y)
    right = run_binary(BinOp.SHR, x, y)
    assert [int(v) for v in left] == [wrap(v << s, t) for v, s in zip(values, amounts, strict=True)]
    # Python's >> on ints is arithmetic; for unsigned values (never negative) also logical.
    assert [int(v) for v in right] == [v >> s for v, s in zip(values, amounts, strict=True)]


def test_shift_right_is_arithmetic_for_signed_and_logical_for_unsigned() -> None:
    amount = np.array([4], np.int32)
    assert run_binary(BinOp.SHR, np.array([-256], np.int32), amount)[0] == -16
    assert run_binary(BinOp.SHR, np.array([0xFFFFFF00], np.uint32), amount)[0] == 0x0FFFFFF0


@pytest.mark.parametrize("amount", [-1, 32, 40])
def test_shift_by_an_amount_outside_the_width_is_a_launch_error(amount: int) -> None:
    with pytest.raises(LaunchError) as info:
        run_binary(BinOp.SHL, np.array([1, 1], np.int32), np.array([3, amount], np.int32))
    assert str(amount) in info.value.detail
    assert "[0, 32)" in info.value.detail
    assert info.value.invocations == (((0, 0, 0), (1, 0, 0)),)


def test_bitwise_operators_on_integers_and_bool() -> None:
    x, y = np.array([0b1100], np.int32), np.array([0b1010], np.int32)
    assert run_binary(BinOp.AND, x, y)[0] == 0b1000
    assert run_binary(BinOp.OR, x, y)[0] == 0b1110
    assert run_binary(BinOp.XOR, x, y)[0] == 0b0110
    p, q = np.array([True, True, False]), np.array([True, False, False])
    assert list(run_binary(BinOp.XOR, p, q)) == [False, True, False]


def test_comparisons_give_bool_and_follow_ieee_for_nan() -> None:
    x = np.array([1.0, np.nan, 2.0], np.float32)
    y = np.array([2.0, np.nan, 2.0], np.float32)
    assert list(run_binary(BinOp.LT, x, y)) == [True, False, False]
    assert list(run_binary(BinOp.NE, x, y)) == [True, True, False]
    assert list(run_binary(BinOp.GE, x, y)) == [False, False, True]


# --------------------------------------------------------------------------- casts


def run_cast(x: np.ndarray, src: ElemType, dst: ElemType) -> np.ndarray:
    return run_unary(src, dst, cast(var("v", src), dst), x)


def test_float_to_int_truncates_toward_zero_and_saturates() -> None:
    x = np.array([2.9, -2.9, 3e9, -3e9, np.inf, -np.inf, np.nan, -0.5], np.float32)
    assert list(run_cast(x, F32, I32)) == [2, -2, 2**31 - 1, -(2**31), 2**31 - 1, -(2**31), 0,
                                           0]
    assert list(run_cast(x, F32, ElemType.U8)) == [2, 0, 255, 0, 255, 0, 0, 0]


def test_f64_to_64_bit_integers_saturates_at_the_exact_limits() -> None:
    x = np.array([2.0**63, -(2.0**63), 2.0**64, 2.0**63 - 1024, 1.5e19], np.float64)
    assert [int(v) for v in run_cast(x, F64, ElemType.I64)] == [
        2**63 - 1, -(2**63), 2**63 - 1, 2**63 - 1024, 2**63 - 1]
    assert [int(v) for v in run_cast(x, F64, ElemType.U64)] == [
        2**63, 0, 2**64 - 1, 2**63 - 1024, 15 * 10**18]


def test_int_to_int_casts_wrap() -> None:
    x = np.array([300, -1, 128, -129], np.int32)
    assert list(run_cast(x, I32, ElemType.I8)) == [44, -1, -128, 127]
    assert list(run_cast(x, I32, ElemType.U16)) == [300, 65535, 128, 65407]


def test_cast_to_bool_is_nonzero_and_bool_to_number_is_0_or_1() -> None:
    x = np.array([0.0, -0.0, 0.5, np.nan], np.float32)
    assert list(run_cast(x, F32, ElemType.BOOL)) == [False, False, True, True]
    assert list(run_cast(np.array([True, False]), ElemType.BOOL, F32)) == [1.0, 0.0]


@pytest.mark.parametrize("dst,dtype", [(ElemType.F16, np.float16),
                                       (ElemType.BF16, ml_dtypes.bfloat16)])
@SETTINGS
@given(values=st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=50))
def test_f32_to_f16_and_bf16_round_like_numpy_and_ml_dtypes(dst: ElemType, dtype: object,
                                                            values: list[float]) -> None:
    x = np.array(values, np.float32)
    got = run_cast(x, F32, dst)
    assert got.dtype == np.dtype(dtype)
    with np.errstate(over="ignore"):
        want = x.astype(dtype)
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))


FORMATS = {ElemType.F16: (11, -14, 15), ElemType.BF16: (8, -126, 127), F32: (24, -126, 127)}


@pytest.mark.parametrize("dst", list(FORMATS))
@SETTINGS
@given(values=st.lists(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e38,
                                 max_value=1e38), min_size=1, max_size=40))
@example(values=[1 + 2**-8 + 2**-30, 1 + 2**-11 + 2**-40, 1 + 2**-24 + 2**-60])
def test_f64_to_narrow_floats_rounds_once(dst: ElemType, values: list[float]) -> None:
    # 1 + 2**-8 + 2**-30 is just above a bf16 tie; rounding through f32 would land on it.
    got = run_cast(np.array(values, np.float64), F64, dst).astype(np.float64)
    assert list(got) == [round_fraction(Fraction(v), *FORMATS[dst]) for v in values]


@pytest.mark.parametrize("src", [I32, ElemType.I64, ElemType.U64])
@pytest.mark.parametrize("dst", [ElemType.BF16, F32, F64])
@SETTINGS
@given(data=st.data())
def test_integers_to_floats_round_once_to_nearest_even(src: ElemType, dst: ElemType,
                                                       data: st.DataObject) -> None:
    lo, hi = int_range(src)
    # Values just above ties of the narrow format, where rounding twice goes wrong.
    tricky = st.builds(lambda e, d, s: min(hi, (1 << e) + (1 << max(0, e - d)) + s),
                       st.integers(10, src.bits - 2), st.sampled_from([9, 25, 54]),
                       st.sampled_from([1, 0, -1]))
    values = data.draw(st.lists(st.one_of(st.integers(lo, hi), tricky), min_size=1,
                                max_size=30))
    formats = {**FORMATS, F64: (53, -1022, 1023)}
    got = run_cast(np.array(values, INT_TYPES[src]), src, dst).astype(np.float64)
    assert list(got) == [round_fraction(Fraction(v), *formats[dst]) for v in values]


# --------------------------------------------------------------------------- floats


def test_f32_multiply_add_rounds_twice_without_contraction() -> None:
    # a*b = 1 + 2**-11 + 2**-24 is a tie in f32: rounded it drops 2**-24, and adding c = -1
    # leaves 2**-11, while a fused a*b + c keeps it.
    a = np.float32(1 + 2**-12)
    x, y = np.array([a], np.float32), np.array([a], np.float32)
    e = binary(BinOp.ADD, binary(BinOp.MUL, load("x", var("i"), F32), load("y", var("i"), F32)),
               const(-1.0, F32))
    k = kernel([array("x", F32), array("y", F32), array("out", F32), scalar("n")],
               ir.Let(name="i", type=I32, value=tid()),
               ir.Store(array="out", index=var("i"), value=e))
    got = launch_1d(k, [x, y, np.zeros(1, np.float32), 1], block=1)["out"][0]
    assert got == np.float32(np.float32(a * a) - np.float32(1))
    assert got == 2**-11
    fused = round_f32(Fraction(float(a)) ** 2 - 1)
    assert fused != got


def fma_kernel(t: ElemType) -> ir.Kernel:
    i = var("i")
    e = call(MathFn.FMA, load("a", i, t), load("b", i, t), load("c", i, t))
    return kernel([array("a", t), array("b", t), array("c", t), array("out", t), scalar("n")],
                  ir.Let(name="i", type=I32, value=tid()),
                  ir.If(cond=binary(BinOp.LT, i, var("n")),
                        then=(ir.Store(array="out", index=i, value=e),)))


def run_fma(t: ElemType, a: list[float], b: list[float], c: list[float]) -> np.ndarray:
    dt = np.float32 if t is F32 else np.float64
    args = [np.array(v, dt) for v in (a, b, c)] + [np.zeros(len(a), dt), len(a)]
    return launch_1d(fma_kernel(t), args)["out"]


def exact_fma(a: float, b: float, c: float) -> Fraction:
    return Fraction(a) * Fraction(b) + Fraction(c)


finite32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@st.composite
def adversarial_f32_fma(draw: st.DrawFn) -> tuple[float, float, float]:
    """Products that sit on or next to an f32 tie, with addends far below the product's last
    place (a rounding in f64 then f32 gets these wrong) or cancelling its high part."""
    a = float(np.float32(1 + draw(st.integers(1, 2**11)) * 2**-12))
    b = float(np.float32(1 + draw(st.integers(1, 2**11)) * 2**-12))
    scale = 2.0 ** draw(st.integers(-60, 60))
    sign = draw(st.sampled_from([1.0, -1.0]))
    tiny = float(np.float32(draw(st.sampled_from([1.0, -1.0, 1.5, -0.75])) * 2.0 ** draw(
        st.integers(-100, -30))))
    cancel = -float(np.float32(a * b))
    c = draw(st.sampled_from([tiny, cancel, 0.0, -0.0]))
    return float(np.float32(a * scale * sign)), b, float(np.float32(c * scale))


@SETTINGS
@given(triples=st.lists(st.one_of(st.tuples(finite32, finite32, finite32),
                                  adversarial_f32_fma()), min_size=1, max_size=40))
def test_f32_fma_rounds_once_like_exact_arithmetic(
        triples: list[tuple[float, float, float]]) -> None:
    a, b, c = ([t[i] for t in triples] for i in range(3))
    got = run_fma(F32, a, b, c)
    for (x, y, z), g in zip(triples, got, strict=True):
        exact = exact_fma(x, y, z)
        # An exact zero takes its sign from IEEE's rule for sums, which f64 applies too.
        want = round_f32(exact) if exact != 0 else x * y + z
        assert float(g) == want and math.copysign(1, float(g)) == math.copysign(1, want), (
            x, y, z)


def test_f32_fma_double_rounding_case() -> None:
    # (1 + 2**-12)**2 = 1 + 2**-11 + 2**-24 is an f32 tie; 2**-60 tips it up. Rounding to f64
    # first would lose 2**-60 and round to even (down).
    a = 1 + 2**-12
    got = run_fma(F32, [a], [a], [2**-60])[0]
    assert got == np.float32(1 + 2**-11 + 2**-23)


def test_f32_fma_propagates_infinities_and_nan() -> None:
    got = run_fma(F32, [np.inf, np.inf, 1.0, 3e38], [0.0, 1.0, 1.0, 10.0],
                  [1.0, -np.inf, np.nan, 0.0])
    assert np.isnan(got[0]) and np.isnan(got[1]) and np.isnan(got[2]) and got[3] == np.inf


finite64 = st.floats(allow_nan=False, allow_infinity=False)


@settings(max_examples=30, deadline=None)
@given(triples=st.lists(st.tuples(finite64, finite64, finite64), min_size=1, max_size=20))
@example(triples=[(1 + 2**-30, 1 + 2**-30, 2**-200), (1e308, 2.0, -1.5e308), (0.1, 10.0, -1.0),
                   (1e308, 10.0, 1e308)])
def test_f64_fma_rounds_once_like_exact_arithmetic(
        triples: list[tuple[float, float, float]]) -> None:
    a, b, c = ([t[i] for t in triples] for i in range(3))
    got = run_fma(F64, a, b, c)
    for (x, y, z), g in zip(triples, got, strict=True):
        exact = exact_fma(x, y, z)
        if exact != 0:
            assert float(g) == round_f64(exact), (x, y, z)


@pytest.mark.parametrize("fn,pick", [(MathFn.MIN, min), (MathFn.MAX, max)])
def test_float_min_and_max_let_a_number_win_over_nan(fn: MathFn, pick: object) -> None:
    x = np.array([np.nan, 1.0, np.nan, 2.0], np.float32)
    y = np.array([3.0, np.nan, np.nan, -1.0], np.float32)
    got = run_min_max(fn, x, y)
    assert got[0] == 3.0 and got[1] == 1.0 and np.isnan(got[2])
    assert got[3] == pick(2.0, -1.0)  # type: ignore[operator]


def test_float_min_orders_signed_zeros() -> None:
    x = np.array([0.0, -0.0], np.float32)
    y = np.array([-0.0, 0.0], np.float32)
    assert np.all(np.signbit(run_min_max(MathFn.MIN, x, y)))
    assert not np.any(np.signbit(run_min_max(MathFn.MAX, x, y)))


def run_min_max(fn: MathFn, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    t = F32
    i = var("i")
    e = call(fn, load("x", i, t), load("y", i, t))
    k = kernel([array("x", t), array("y", t), array("out", t), scalar("n")],
               ir.Let(name="i", type=I32, value=tid()),
               ir.If(cond=binary(BinOp.LT, i, var("n")),
                     then=(ir.Store(array="out", index=i, value=e),)))
    return launch_1d(k, [x, y, np.zeros(len(x), np.float32), len(x)])["out"]


@pytest.mark.parametrize("fn", [MathFn.SQRT, MathFn.FLOOR, MathFn.CEIL, MathFn.ABS])
def test_exact_math_functions_match_numpy_on_f32(fn: MathFn) -> None:
    x = np.array([0.0, -0.0, 2.0, 2.5, -2.5, 1e-45, 3.4e38, np.inf, -1.0], np.float32)
    got = run_unary(F32, F32, call(fn, var("v", F32)), x)
    with np.errstate(invalid="ignore"):
        want = {MathFn.SQRT: np.sqrt, MathFn.FLOOR: np.floor, MathFn.CEIL: np.ceil,
                MathFn.ABS: np.abs}[fn](x)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("fn", [MathFn.EXP, MathFn.LOG, MathFn.SIN, MathFn.COS, MathFn.TANH])
def test_f32_transcendentals_are_the_f64_result_rounded(fn: MathFn) -> None:
    x = np.array([0.5, 1.0, 2.0, 10.0, 0.1], np.float32)
    got = run_unary(F32, F32, call(fn, var("v", F32)), x)
    f = {MathFn.EXP: np.exp, MathFn.LOG: np.log, MathFn.SIN: np.sin, MathFn.COS: np.cos,
         MathFn.TANH: np.tanh}[fn]
    assert np.array_equal(got, f(x.astype(np.float64)).astype(np.float32))


def test_integer_abs_min_max() -> None:
    x = np.array([-5, -(2**31), 7], np.int32)
    got = run_unary(I32, I32, call(MathFn.ABS, var("v")), x)
    assert list(got) == [5, -(2**31), 7]
    y = np.array([3, 0, 9], np.int32)
    i = var("i")
    k = kernel([array("x"), array("y"), array("out"), scalar("n")],
               ir.Let(name="i", type=I32, value=tid()),
               ir.If(cond=binary(BinOp.LT, i, var("n")), then=(ir.Store(
                   array="out", index=i,
                   value=call(MathFn.MIN, load("x", i, I32), load("y", i, I32))),)))
    assert list(launch_1d(k, [x, y, np.zeros(3, np.int32), 3])["out"]) == [-5, -(2**31), 7]
