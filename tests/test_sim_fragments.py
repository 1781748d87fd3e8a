"""Fragments in the simulator: one matrix per subgroup, loads and stores in either layout,
multiply-accumulate under the named arithmetic models, and the errors of misuse."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_helpers import add, binary, builtin, const, mul, var

import sim
from sarek import ir
from sarek.errors import LaunchError, OutOfBounds, SharedRace, SubgroupDivergence
from sarek.ir import BinOp, Builtin, ElemType, FragLayout, FragUse, MemSpace
from sim.fragments import mul_add

I32, U8, F16, F32 = ElemType.I32, ElemType.U8, ElemType.F16, ElemType.F32


def sg_id() -> ir.Expr:
    """The subgroup's index over the launch: block_idx.x * (block_dim.x / 32) + subgroup_id."""
    per_block = binary(BinOp.DIV, builtin(Builtin.BLOCK_DIM_X), builtin(Builtin.SUBGROUP_SIZE))
    return add(mul(builtin(Builtin.BLOCK_IDX_X), per_block), builtin(Builtin.SUBGROUP_ID))


def matmul_kernel(operand: ElemType, acc: ElemType, n: int = 16, a_layout: FragLayout =
                  FragLayout.ROW) -> ir.Kernel:
    """Each subgroup g computes c[g] = a[g] @ b[g] + c[g] on n x n matrices from global."""
    g = var("g")
    base = mul(g, const(n * n))
    shape = ir.FragShape(m=n, n=n, k=n)
    body = (
        ir.Let(name="g", type=I32, value=sg_id()),
        ir.FragDecl(name="fa", use=FragUse.A, shape=shape, elem=operand),
        ir.FragDecl(name="fb", use=FragUse.B, shape=shape, elem=operand),
        ir.FragDecl(name="fc", use=FragUse.ACCUMULATOR, shape=shape, elem=acc),
        ir.FragLoad(frag="fa", array="a", offset=base, stride=const(n), layout=a_layout),
        ir.FragLoad(frag="fb", array="b", offset=base, stride=const(n)),
        ir.FragLoad(frag="fc", array="c", offset=base, stride=const(n)),
        ir.FragMulAdd(d="fc", a="fa", b="fb", c="fc"),
        ir.FragStore(frag="fc", array="c", offset=base, stride=const(n)),
    )
    params = (ir.ArrayParam(name="a", elem=operand), ir.ArrayParam(name="b", elem=operand),
              ir.ArrayParam(name="c", elem=acc))
    return ir.Kernel(name="frag_mm", params=params, body=body)


def test_integer_multiply_accumulate_is_exact_and_wraps() -> None:
    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, 3 * 256, dtype=np.uint8)
    b = rng.integers(0, 256, 3 * 256, dtype=np.uint8)
    c = rng.integers(2**31 - 10**5, 2**31 - 1, 3 * 256, dtype=np.int32)
    out = sim.simulate(matmul_kernel(U8, I32), [a, b, c], grid=1, block=96)["c"]
    want = (np.einsum("gmk,gkn->gmn", a.reshape(3, 16, 16).astype(np.int64),
                      b.reshape(3, 16, 16).astype(np.int64)) + c.reshape(3, 16, 16)).ravel()
    assert np.array_equal(out, want.astype(np.int32))  # wraps past INT_MAX


def test_column_major_load_transposes() -> None:
    rng = np.random.default_rng(2)
    a = rng.integers(0, 5, 256, dtype=np.uint8)
    b = rng.integers(0, 5, 256, dtype=np.uint8)
    out = sim.simulate(matmul_kernel(U8, I32, a_layout=FragLayout.COL),
                       [a, b, np.zeros(256, np.int32)], grid=1, block=32)["c"]
    want = a.reshape(16, 16).T.astype(np.int64) @ b.reshape(16, 16).astype(np.int64)
    assert np.array_equal(out, want.ravel().astype(np.int32))


def test_sequential_model_adds_products_in_k_order() -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal(2 * 256).astype(np.float16)
    b = rng.standard_normal(2 * 256).astype(np.float16)
    c = rng.standard_normal(2 * 256).astype(np.float32)
    out = sim.simulate(matmul_kernel(F16, F32), [a, b, c], grid=1, block=64)["c"]
    want = c.reshape(2, 16, 16).copy()
    af, bf = a.reshape(2, 16, 16).astype(np.float32), b.reshape(2, 16, 16).astype(np.float32)
    for k in range(16):
        want = want + af[:, :, k, None] * bf[:, None, k, :]
    assert np.array_equal(out, want.ravel())


def test_models_differ_where_products_fall_below_the_accumulator() -> None:
    # c = 1 plus sixteen products of 2^-25: in order each is lost, summed exactly they are not.
    a = np.zeros(256, np.float16)
    b = np.zeros(256, np.float16)
    a[:16] = 2.0**-13
    b[0:256:16] = 2.0**-12
    c = np.zeros(256, np.float32)
    c[0] = 1.0
    k = matmul_kernel(F16, F32)
    seq = sim.simulate(k, [a, b, c], grid=1, block=32, arith="sequential")["c"][0]
    exact = sim.simulate(k, [a, b, c], grid=1, block=32, arith="exact")["c"][0]
    assert seq == np.float32(1.0)
    assert exact == np.float32(1 + 2.0**-21)


def exact_round_f32(value: Fraction) -> np.float32:
    """Round-to-nearest-even of an exact rational to f32, by bracketing with neighbours."""
    x = np.float32(float(value))
    for _ in range(2):
        lo, hi = (np.nextafter(x, np.float32(-np.inf)), x) if Fraction(float(x)) > value else \
            (x, np.nextafter(x, np.float32(np.inf)))
        dl, dh = value - Fraction(float(lo)), Fraction(float(hi)) - value
        x = lo if dl < dh or (dl == dh and int(lo.view(np.uint32)) % 2 == 0) else hi
    return x


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(-30, 10))
def test_exact_model_rounds_the_exact_sum_once(seed: int, spread: int) -> None:
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((1, 2, 16)) * 2.0 ** rng.integers(spread, 11, (1, 2, 16))
         ).astype(np.float16)
    b = rng.standard_normal((1, 16, 2)).astype(np.float16)
    c = rng.standard_normal((1, 2, 2)).astype(np.float32)
    got = mul_add(a, b, c, "exact")
    for i in range(2):
        for j in range(2):
            total = Fraction(float(c[0, i, j])) + sum(
                Fraction(float(a[0, i, k])) * Fraction(float(b[0, k, j])) for k in range(16))
            assert got[0, i, j] == exact_round_f32(total)


def test_unknown_model_is_refused() -> None:
    with pytest.raises(LaunchError, match="unknown arithmetic model 'fast'"):
        sim.simulate(matmul_kernel(U8, I32), [np.zeros(256, np.uint8)] * 2
                     + [np.zeros(256, np.int32)], grid=1, block=32, arith="fast")


def test_partial_subgroup_is_refused() -> None:
    k = matmul_kernel(U8, I32)
    guarded = k.model_copy(update={"body": (k.body[0], ir.If(
        cond=binary(BinOp.LT, builtin(Builtin.THREAD_IDX_X), const(20)), then=k.body[1:]),)})
    with pytest.raises(SubgroupDivergence, match="20 of the 32 lanes"):
        sim.simulate(guarded, [np.zeros(256, np.uint8)] * 2 + [np.zeros(256, np.int32)],
                     grid=1, block=32)


def test_offset_differing_between_lanes_is_refused() -> None:
    k = matmul_kernel(U8, I32)
    body = list(k.body)
    body[4] = ir.FragLoad(frag="fa", array="a", offset=builtin(Builtin.THREAD_IDX_X),
                          stride=const(16))
    with pytest.raises(SubgroupDivergence, match="differs between the lanes"):
        sim.simulate(k.model_copy(update={"body": tuple(body)}),
                     [np.zeros(300, np.uint8), np.zeros(256, np.uint8), np.zeros(256, np.int32)],
                     grid=1, block=32)


def test_fragment_outside_its_array_is_out_of_bounds() -> None:
    with pytest.raises(OutOfBounds, match=r"index 200 is outside global array 'a' of 200 "
                       r"elements \(fragment 'fa'\) at body\[4\]; invocations: block \(0, 0, 0\) "
                       r"thread \(0, 0, 0\)"):
        sim.simulate(matmul_kernel(U8, I32), [np.zeros(200, np.uint8), np.zeros(256, np.uint8),
                                              np.zeros(256, np.int32)], grid=1, block=32)


def test_block_of_partial_subgroups_is_refused() -> None:
    with pytest.raises(LaunchError, match="not a multiple of the subgroup size 32"):
        sim.simulate(matmul_kernel(U8, I32), [np.zeros(256, np.uint8)] * 2
                     + [np.zeros(256, np.int32)], grid=1, block=48)


def test_subgroups_of_64_own_one_fragment_each() -> None:
    rng = np.random.default_rng(5)
    a = rng.integers(0, 9, 2 * 256, dtype=np.uint8)
    b = rng.integers(0, 9, 2 * 256, dtype=np.uint8)
    out = sim.simulate(matmul_kernel(U8, I32), [a, b, np.zeros(512, np.int32)], grid=1,
                       block=128, subgroup=64)["c"]
    want = np.einsum("gmk,gkn->gmn", a.reshape(2, 16, 16).astype(np.int64),
                     b.reshape(2, 16, 16).astype(np.int64))
    assert np.array_equal(out, want.ravel().astype(np.int32))


def test_shared_fragment_store_read_without_barrier_is_a_race() -> None:
    body = (
        ir.ArrayDecl(name="s", elem=I32, size=256, space=MemSpace.SHARED),
        ir.FragDecl(name="f", use=FragUse.ACCUMULATOR, shape=ir.FragShape(m=16, n=16, k=16),
                    elem=I32),
        ir.FragFill(frag="f", value=const(7)),
        ir.FragStore(frag="f", array="s", offset=const(0), stride=const(16)),
        ir.Store(array="out", index=builtin(Builtin.THREAD_IDX_X),
                 value=ir.Load(array="s", index=add(builtin(Builtin.THREAD_IDX_X), const(100)),
                               type=I32)),
    )
    k = ir.Kernel(name="race", params=(ir.ArrayParam(name="out", elem=I32),), body=body)
    with pytest.raises(SharedRace, match="read-after-write"):
        sim.simulate(k, [np.zeros(32, np.int32)], grid=1, block=32)


# ------------------------------------------------------------------------- the H200 model


def h200_single(a_row: list[float], b_col: list[float], c0: float) -> np.float32:
    """One output of one 16x16x8 multiply-accumulate under the h200 model."""
    a = np.zeros((1, 16, 16), np.float16)
    b = np.zeros((1, 16, 8), np.float16)
    c = np.zeros((1, 16, 8), np.float32)
    a[0, 0, : len(a_row)] = a_row
    b[0, : len(b_col), 0] = b_col
    c[0, 0, 0] = c0
    return mul_add(a, b, c, "h200")[0, 0, 0]


def test_h200_model_keeps_products_below_the_addends_last_place() -> None:
    # Measured on the H200: C = 1 plus sixteen products of 2^-25 gives 1 + 2^-21.
    assert h200_single([2.0**-13] * 16, [2.0**-12] * 16, 1.0) == np.float32(1 + 2.0**-21)


def test_h200_model_truncates_the_sum() -> None:
    # Measured on the H200: 1 + 2^-24 + 2^-23 gives 1 + 2^-23 (nearest would be 1 + 2^-22).
    assert h200_single([2.0**-12, 2.0**-11], [2.0**-12, 2.0**-12], 1.0) == np.float32(
        1 + 2.0**-23)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_h200_model_equals_exact_when_no_bit_is_lost(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.integers(-8, 9, (2, 16, 16)).astype(np.float16)
    b = rng.integers(-8, 9, (2, 16, 8)).astype(np.float16)
    c = rng.integers(-100, 101, (2, 16, 8)).astype(np.float32)
    assert np.array_equal(mul_add(a, b, c, "h200"), mul_add(a, b, c, "exact"))


def test_h200_model_runs_in_the_simulator() -> None:
    a = np.zeros(256, np.float16)
    b = np.zeros(256, np.float16)
    a[:16], b[0:256:16] = 2.0**-13, 2.0**-12
    c = np.zeros(256, np.float32)
    c[0] = 1.0
    out = sim.simulate(matmul_kernel(F16, F32), [a, b, c], grid=1, block=32, arith="h200")["c"]
    assert out[0] == np.float32(1 + 2.0**-21)


def test_h200_model_refuses_other_operands() -> None:
    with pytest.raises(ValueError, match="f16 and bf16 operands with an f32 accumulator"):
        mul_add(np.zeros((1, 2, 2), np.float32), np.zeros((1, 2, 2), np.float32),
                np.zeros((1, 2, 2), np.float32), "h200")


def test_a_kernel_written_for_one_subgroup_size_refuses_another() -> None:
    k = matmul_kernel(U8, I32).model_copy(update={"subgroup": 64})
    args = [np.zeros(512, np.uint8)] * 2 + [np.zeros(512, np.int32)]
    with pytest.raises(LaunchError, match="written for subgroups of 64 lanes, not 32"):
        sim.simulate(k, args, grid=1, block=128, subgroup=32)
    sim.simulate(k, args, grid=1, block=128)  # its own size by default


def test_a_kernel_written_for_one_block_shape_refuses_another() -> None:
    k = matmul_kernel(U8, I32).model_copy(update={"block": (64, 1, 1)})
    args = [np.zeros(512, np.uint8)] * 2 + [np.zeros(512, np.int32)]
    with pytest.raises(LaunchError, match=r"written for blocks of \(64, 1, 1\), not \(32, 1, 1\)"):
        sim.simulate(k, args, grid=1, block=32)
    sim.simulate(k, args, grid=1, block=64)


# ----------------------------------------------------------------- element-wise add


def add_kernel(t: ElemType, n: int = 16) -> ir.Kernel:
    """Each even subgroup g computes z[g] = x[g] + y[g] on n x n accumulators; odd subgroups
    do not reach the add and store their fill value 7."""
    g = var("g")
    base = mul(g, const(n * n))
    shape = ir.FragShape(m=n, n=n, k=n)
    even = binary(BinOp.EQ, binary(BinOp.REM, g, const(2)), const(0))
    body = (
        ir.Let(name="g", type=I32, value=sg_id()),
        *(ir.FragDecl(name=f"f{a}", use=FragUse.ACCUMULATOR, shape=shape, elem=t)
          for a in "xyz"),
        ir.FragLoad(frag="fx", array="x", offset=base, stride=const(n)),
        ir.FragLoad(frag="fy", array="y", offset=base, stride=const(n)),
        ir.FragFill(frag="fz", value=ir.Const(value=7 if t.is_int else 7.0, type=t)),
        ir.If(cond=even, then=(ir.FragAdd(d="fz", a="fx", b="fy"),)),
        ir.FragStore(frag="fz", array="z", offset=base, stride=const(n)),
    )
    params = tuple(ir.ArrayParam(name=a, elem=t) for a in "xyz")
    return ir.Kernel(name="frag_add", params=params, body=body)


def added(t: ElemType, x: np.ndarray, y: np.ndarray, n: int = 16) -> np.ndarray:
    """z after ``add_kernel`` on four subgroups."""
    z = np.zeros_like(x)
    out: np.ndarray = sim.simulate(add_kernel(t, n), [x, y, z], grid=1, block=128)["z"]
    return out.reshape(4, n * n)


def test_fragment_add_of_f32_rounds_each_sum_once_to_nearest_even() -> None:
    rng = np.random.default_rng(31)
    x = (rng.standard_normal(1024) * 2.0 ** rng.integers(-40, 40, 1024)).astype(np.float32)
    y = (rng.standard_normal(1024) * 2.0 ** rng.integers(-40, 40, 1024)).astype(np.float32)
    tiny, big = 2.0**-149, float(np.finfo(np.float32).max)
    special = [(1.0, 2.0**-24), (1 + 2.0**-23, 2.0**-24), (-0.0, -0.0), (-0.0, 0.0),
               (np.inf, -np.inf), (tiny, tiny), (big, big), (3.0, -3.0), (np.nan, 1.0)]
    for i, (a, b) in enumerate(special):
        x[i], y[i] = a, b
    got = added(F32, x, y)
    # Float64 holds the sum of two f32 exactly or within half an f64 unit, and rounding that
    # to f32 is the correctly rounded sum (53 >= 2 * 24 + 2).
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf, FLT_MAX + FLT_MAX
        want = (x.astype(np.float64) + y.astype(np.float64)).astype(np.float32).reshape(4, 256)
    assert np.isnan(want[0, 4]) and np.isnan(want[0, 8])
    assert [float(v) for v in want[0, :4]] == [1.0, 1 + 2.0**-22, 0.0, 0.0]
    assert np.signbit(want[0, 2]) and not np.signbit(want[0, 3])
    even = want[[0, 2]]
    assert np.array_equal(np.isnan(got[[0, 2]]), np.isnan(even))
    keep = ~np.isnan(even)
    assert np.array_equal(got[[0, 2]][keep].view(np.uint32), even[keep].view(np.uint32))
    assert (got[[1, 3]] == 7.0).all()


def test_fragment_add_of_i32_wraps() -> None:
    rng = np.random.default_rng(32)
    x = rng.integers(-(2**31), 2**31, 1024, dtype=np.int64).astype(np.int32)
    y = rng.integers(-(2**31), 2**31, 1024, dtype=np.int64).astype(np.int32)
    x[0], y[0] = 2**31 - 1, 1
    got = added(I32, x, y)
    wide = x.astype(np.int64) + y.astype(np.int64)
    want = (wide % 2**32).astype(np.uint32).view(np.int32).reshape(4, 256)
    assert got[0, 0] == -(2**31)
    assert np.array_equal(got[[0, 2]], want[[0, 2]]) and (got[[1, 3]] == 7).all()


def test_fragment_add_of_8x8_accumulators_over_subgroups_of_64() -> None:
    rng = np.random.default_rng(33)
    x, y = (rng.standard_normal(4 * 64).astype(np.float32) for _ in range(2))
    kernel = add_kernel(F32, 8)
    out = sim.simulate(kernel, [x, y, np.zeros_like(x)], grid=1, block=128,
                       subgroup=64)["z"].reshape(4, 64)
    want = (x.astype(np.float64) + y.astype(np.float64)).astype(np.float32).reshape(4, 64)
    assert np.array_equal(out[0], want[0]) and (out[1] == 7.0).all()
