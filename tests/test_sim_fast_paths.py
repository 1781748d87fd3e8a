"""The simulator's fast paths agree with the slow ones they replace: the chunked ``h200`` model
with the unchunked formula, and values that keep only the launch axes they depend on with the
same values spread over every invocation (results, out-of-bounds reports, races)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_helpers import I32, add, array, binary, builtin, const, kernel, load, lt, mul, var

import sim
from sarek import ir
from sarek.errors import OutOfBounds, SharedRace, SimError
from sarek.ir import BinOp, Builtin, MemSpace
from sim import tensor_core

# --------------------------------------------------------------------------- h200 in chunks


def truncate_to_f32(v: np.ndarray) -> np.ndarray:
    """``v`` (float64) converted to f32 by truncation toward zero; beyond f32's range, inf
    (the model's first conversion, kept here as part of the oracle)."""
    with np.errstate(over="ignore"):
        nearest = v.astype(np.float32)
    too_far = np.abs(nearest.astype(np.float64)) > np.abs(v)
    toward_zero = np.nextafter(nearest, np.float32(0))  # from inf: the largest finite f32
    out = np.where(too_far, toward_zero, nearest)
    huge = np.abs(v) >= 2.0**128
    return np.where(huge, np.copysign(np.float32(np.inf), v).astype(np.float32), out)


def unchunked_h200(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The model as first written: every term's significand and exponent split with frexp,
    (groups, m, n, k+1) arrays aligned with ldexp, summed, truncated (the oracle); with the
    rules the H200 confirmed later: a zero term aligns at exponent -133, a zero result is +0,
    a NaN result is 0x7FFFFFFF."""
    def split(x: np.ndarray, min_exponent: int) -> tuple[np.ndarray, np.ndarray]:
        mant, exp = np.frexp(x)
        s, e = mant * 2.0, exp.astype(np.int64) - 1
        low = e < min_exponent
        s = np.where(low, np.ldexp(s, np.minimum(e - min_exponent, 0)), s)
        e = np.where(low, min_exponent, e)
        return s, np.where(x == 0, -133, e)

    lowest = {np.dtype(np.float16): -14}
    a64, b64, c64 = (x.astype(np.float64) for x in (a, b, c))
    sa, ea = split(a64, lowest.get(a.dtype, -126))
    sb, eb = split(b64, lowest.get(b.dtype, -126))
    sc, ec = split(c64, -126)
    s = np.concatenate([sc[..., None], sa[:, :, None, :] * np.moveaxis(sb, 1, 2)[:, None]], -1)
    products_e = ea[:, :, None, :] + np.moveaxis(eb, 1, 2)[:, None]
    zero_product = (a64[:, :, None, :] * np.moveaxis(b64, 1, 2)[:, None]) == 0
    e = np.concatenate([ec[..., None], np.where(zero_product, -133, products_e)], -1)
    top = e.max(axis=-1, keepdims=True)
    aligned = np.trunc(np.ldexp(s, np.clip(25 + e - top, -1100, 60)))
    value = np.ldexp(aligned.sum(axis=-1), (top[..., 0] - 25).astype(np.int64))
    out = truncate_to_f32(value)
    out[out == 0] = 0.0
    products = a64[:, :, None, :] * np.moveaxis(b64, 1, 2)[:, None]
    special = ~np.isfinite(products).all(axis=-1) | ~np.isfinite(c64)
    ieee = (products.sum(axis=-1) + c64).astype(np.float32)
    ieee[np.isnan(ieee)] = np.uint32(0x7FFFFFFF).view(np.float32)
    return np.where(special, ieee, out)


KINDS = ("bits", "normal", "wide", "tiny", "signed zeros")


def operand(rng: np.random.Generator, dtype: type, shape: tuple[int, ...], kind: str
            ) -> np.ndarray:
    if kind == "bits":  # every pattern: NaN, infinities, subnormals, zeros of both signs
        width = np.uint32 if dtype is np.float32 else np.uint16
        return rng.integers(0, np.iinfo(width).max, shape, dtype=width, endpoint=True).view(
            dtype)
    scale = {"normal": 1.0, "wide": 2.0 ** rng.integers(-40, 40, shape),
             "tiny": 2.0 ** rng.integers(-150, -100, shape)}.get(kind, 0.0)
    x = rng.standard_normal(shape) * scale
    if kind == "signed zeros":
        x = rng.choice([0.0, -0.0, 2.0**-24, -(2.0**-133), 1.0], shape)
    with np.errstate(over="ignore"):
        return x.astype(dtype)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), groups=st.integers(1, 2 * tensor_core.CHUNK + 3),
       bf16=st.booleans(), kind=st.sampled_from(KINDS), k=st.sampled_from((8, 16)))
def test_the_chunked_h200_model_equals_the_unchunked_formula(
        seed: int, groups: int, bf16: bool, kind: str, k: int) -> None:
    rng = np.random.default_rng(seed)
    dtype = ml_dtypes.bfloat16 if bf16 else np.float16
    a, b = operand(rng, dtype, (groups, 16, k), kind), operand(rng, dtype, (groups, k, 8), kind)
    c = operand(rng, np.float32, (groups, 16, 8), kind)
    with np.errstate(all="ignore"):
        want = unchunked_h200(a, b, c)
        got = tensor_core.mul_add(a, b, c)
    assert got.dtype == np.float32
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


# --------------------------------------------------------------------------- launch axes

GRID, BLOCK = (3, 2, 1), (4, 5, 1)
TX, TY = builtin(Builtin.THREAD_IDX_X), builtin(Builtin.THREAD_IDX_Y)
BX, BY = builtin(Builtin.BLOCK_IDX_X), builtin(Builtin.BLOCK_IDX_Y)


def sub(a: ir.Expr, b: ir.Expr) -> ir.Binary:
    return binary(BinOp.SUB, a, b)


def spread(e: ir.Expr) -> ir.Expr:
    """``e + (linear - linear)``: the same value, but one element per invocation (the linear
    id depends on every axis of the launch)."""
    linear = add(mul(add(mul(BY, const(3)), BX), const(20)), add(mul(TY, const(4)), TX))
    return add(e, sub(linear, linear))


def gather_kernel(fast: bool) -> ir.Kernel:
    """``out[id] = a[ty*7 + bx] + a[tx + by]`` under ``if tx < 3`` (an index of one or two
    axes), or the same with spread indices."""
    ident = (lambda e: e) if fast else spread
    i = var("i")
    return kernel(
        [array("a", I32, readonly=True), array("out", I32)],
        ir.Let(name="i", type=I32, value=spread(const(0))),
        ir.If(cond=lt(TX, const(3)), then=(
            ir.Store(array="out", index=add(mul(add(mul(BY, const(3)), BX), const(20)),
                                            add(mul(TY, const(4)), TX)),
                     value=add(load("a", ident(add(mul(TY, const(7)), BX)), I32),
                               add(load("a", ident(add(TX, BY)), I32), i))),
        )),
    )


def run(k: ir.Kernel, a_size: int) -> dict[str, np.ndarray]:
    a = np.arange(a_size, dtype=np.int32) * 3 + 1
    return sim.simulate(k, {"a": a, "out": np.zeros(120, np.int32)}, grid=GRID, block=BLOCK)


def failure(k: ir.Kernel, a_size: int, error: type[SimError]) -> SimError:
    with pytest.raises(error) as info:
        run(k, a_size)
    return info.value


def test_a_gather_over_few_axes_equals_the_spread_gather() -> None:
    fast, slow = run(gather_kernel(True), 40)["out"], run(gather_kernel(False), 40)["out"]
    assert np.array_equal(fast, slow)
    assert fast[0 * 20 + 1 * 4 + 2] == (1 * 7 + 0) * 3 + 1 + (2 + 0) * 3 + 1


def test_an_out_of_bounds_gather_over_few_axes_reports_as_the_spread_one() -> None:
    fast = failure(gather_kernel(True), 30, OutOfBounds)  # ty*7 + bx reaches 30 at ty=4
    slow = failure(gather_kernel(False), 30, OutOfBounds)
    assert "index 30 is outside global array 'a'" in fast.detail
    assert (fast.detail, fast.statement, fast.invocations) == (
        slow.detail, slow.statement, slow.invocations)


def test_inactive_invocations_never_fault_on_a_gather_over_few_axes() -> None:
    # only tx < 3 is active; a[tx + by] reaches 4 + 1 = 5 for tx = 4, outside 5 elements
    k = kernel([array("a", I32, readonly=True), array("out", I32)],
               ir.If(cond=lt(TX, const(3)), then=(
                   ir.Store(array="out", index=spread(const(0)),
                            value=load("a", add(TX, BY), I32)),)))
    out = sim.simulate(k, {"a": np.arange(5, dtype=np.int32), "out": np.zeros(1, np.int32)},
                       grid=GRID, block=BLOCK)["out"]
    assert out[0] == 2 + 1  # the last active invocation: tx = 2 of block y = 1


def race_kernel(fast: bool) -> ir.Kernel:
    """Each thread writes ``s[linear]``; then every thread reads ``s[tx]``, which thread tx of
    row 0 wrote: a read-after-write race for every other row."""
    index = TX if fast else spread(TX)
    linear = add(mul(TY, const(4)), TX)
    return kernel([array("a", I32, readonly=True), array("out", I32)],
                  ir.ArrayDecl(name="s", elem=I32, size=20, space=MemSpace.SHARED),
                  ir.Store(array="s", index=linear, value=linear),
                  ir.Store(array="out", index=spread(const(0)), value=load("s", index, I32)))


def test_a_shared_read_over_few_axes_races_as_the_spread_one() -> None:
    fast = failure(race_kernel(True), 1, SharedRace)
    slow = failure(race_kernel(False), 1, SharedRace)
    assert "read-after-write race on shared array 's'" in fast.detail
    assert (fast.detail, fast.invocations) == (slow.detail, slow.invocations)


def test_reads_logged_over_few_axes_still_race_with_a_later_write() -> None:
    # every thread reads s[tx] (logged as one element per tx), then row 1 writes s[tx]:
    # thread (tx, 1) overwrites what threads (tx, 0), (tx, 2), ... read
    k = kernel([array("a", I32, readonly=True), array("out", I32)],
               ir.ArrayDecl(name="s", elem=I32, size=20, space=MemSpace.SHARED),
               ir.Let(name="v", type=I32, value=load("s", TX, I32)),
               ir.If(cond=binary(BinOp.EQ, TY, const(1)), then=(
                   ir.Store(array="s", index=TX, value=var("v")),)))
    err = failure(k, 1, SharedRace)
    assert "write-after-read race on shared array 's' element 0" in err.detail


# --------------------------------------------------------------------------- integer products


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), dtype=st.sampled_from((np.uint8, np.int8, np.int32)),
       magnitude=st.sampled_from((1, 255, 1 << 10, (1 << 10) + 1, 1 << 20, 1 << 31)),
       k=st.sampled_from((8, 16, 32)))
def test_integer_fragment_products_are_exact_on_every_path(
        seed: int, dtype: type, magnitude: int, k: int) -> None:
    # float32 BLAS below 2^24, float64 BLAS below 2^53, int64 beyond: each must equal the
    # exact integer sum, wrapped to i32.
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    top = min(magnitude, int(info.max))
    low = max(-top, int(info.min))
    a = rng.integers(low, top, (5, 16, k), dtype=np.int64, endpoint=True).astype(dtype)
    b = rng.integers(low, top, (5, k, 16), dtype=np.int64, endpoint=True).astype(dtype)
    a[0], b[0] = dtype(top), dtype(top)  # the bound itself is reached
    c = rng.integers(-(2**31), 2**31, (5, 16, 16), dtype=np.int64).astype(np.int32)
    want = (np.einsum("gmk,gkn->gmn", a.astype(np.int64), b.astype(np.int64))
            + c.astype(np.int64)).astype(np.int32)
    got = sim.fragments.mul_add(a, b, c, "sequential")
    assert got.dtype == np.int32 and np.array_equal(got, want)


# --------------------------------------------------------------------------- the exact model


def fsum_exact(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The ``exact`` model as first written (the oracle): ``math.fsum`` of every output's
    terms, rounded to odd from the sign of the exact remainder, then to the accumulator."""
    products = a.astype(np.float64)[:, :, :, None] * b.astype(np.float64)[:, None, :, :]
    terms = np.concatenate([c.astype(np.float64)[:, :, None, :], products], axis=2)
    flat = np.moveaxis(terms, 2, -1).reshape(-1, terms.shape[2]).tolist()
    sums = np.array([math.fsum(row) for row in flat], np.float64)
    rest = np.array([math.fsum([*row, -s]) for row, s in zip(flat, sums.tolist(), strict=True)])
    if c.dtype == np.float64:
        return sums.reshape(c.shape)
    fix = (rest != 0) & ((sums.view(np.int64) & 1) == 0)
    odd = np.where(fix, np.nextafter(sums, np.where(rest > 0, np.inf, -np.inf)), sums)
    with np.errstate(over="ignore"):
        return odd.astype(c.dtype).reshape(c.shape)


def finite_operand(rng: np.random.Generator, dtype: type, shape: tuple[int, ...], kind: str
                   ) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        x = operand(rng, dtype, shape, kind)
        return np.where(np.isfinite(x.astype(np.float64)), x, dtype(0.0)).astype(dtype)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), groups=st.integers(1, 9), bf16=st.booleans(),
       kind=st.sampled_from(KINDS), wide=st.booleans())
def test_the_vectorized_exact_model_equals_fsum(seed: int, groups: int, bf16: bool, kind: str,
                                                wide: bool) -> None:
    rng = np.random.default_rng(seed)
    dtype = ml_dtypes.bfloat16 if bf16 else np.float16
    acc = np.float64 if wide else np.float32
    a = finite_operand(rng, dtype, (groups, 16, 16), kind)
    b = finite_operand(rng, dtype, (groups, 16, 8), kind)
    c = finite_operand(rng, np.float32, (groups, 16, 8), kind).astype(acc)
    got = sim.fragments.mul_add(a, b, c, "exact")
    assert np.array_equal(got.view(f"u{got.itemsize}"), fsum_exact(a, b, c).view(
        f"u{got.itemsize}"))


def test_the_exact_model_settles_a_tie_by_the_term_after_it() -> None:
    # 1 + 2^-53 + 2^-80: the first two tie at f64's midpoint, the third breaks it upward.
    a = np.zeros((1, 1, 16), np.float32)
    b = np.zeros((1, 16, 1), np.float32)
    a[0, 0, :2], b[0, :2, 0] = (2.0**-26, 2.0**-40), (2.0**-27, 2.0**-40)
    c = np.ones((1, 1, 1), np.float64)
    assert sim.fragments.mul_add(a, b, c, "exact")[0, 0, 0] == 1.0 + 2.0**-52


def test_the_exact_model_gives_the_ieee_sum_for_opposite_infinities() -> None:
    a = np.zeros((1, 16, 16), np.float16)
    b = np.zeros((1, 16, 16), np.float16)
    a[0, 0, 0], a[0, 0, 1], b[0, 0, 0], b[0, 1, 0] = np.inf, -np.inf, 1.0, 1.0
    out = sim.fragments.mul_add(a, b, np.zeros((1, 16, 16), np.float32), "exact")
    assert np.isnan(out[0, 0, 0]) and (out[0, 1:] == 0).all()
