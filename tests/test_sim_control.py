"""The simulator's control flow: masks, short circuits, loops, early return, builtins."""

from __future__ import annotations

import numpy as np
import pytest
from sim_helpers import (
    BOOL,
    I32,
    add,
    array,
    binary,
    builtin,
    const,
    kernel,
    launch_1d,
    load,
    lt,
    mul,
    naive_gemm,
    scalar,
    tid,
    var,
)

import sim
from sarek import ir
from sarek.errors import LaunchError
from sarek.ir import BinOp, Builtin, MemSpace

i, n = var("i"), var("n")
LET_I = ir.Let(name="i", type=I32, value=tid())


def gt(a: ir.Expr, b: ir.Expr) -> ir.Binary:
    return binary(BinOp.GT, a, b)


def eq(a: ir.Expr, b: ir.Expr) -> ir.Binary:
    return binary(BinOp.EQ, a, b)


def test_land_guards_the_load_of_invocations_past_the_end() -> None:
    # out[i] = i < n and x[i] > 0, with more invocations than elements of x.
    k = kernel([array("x"), array("out", BOOL), scalar("n")], LET_I, ir.Store(
        array="out", index=i,
        value=binary(BinOp.LAND, lt(i, n), gt(load("x", i, I32), const(0)))))
    x = np.array([3, -1, 0, 7, 2], np.int32)
    out = launch_1d(k, [x, np.zeros(64, bool), 5], n=64)["out"]
    assert list(out) == [True, False, False, True, True] + [False] * 59


def test_lor_evaluates_its_second_operand_only_where_the_first_fails() -> None:
    # out[i] = i >= n or x[i] > 0
    k = kernel([array("x"), array("out", BOOL), scalar("n")], LET_I, ir.Store(
        array="out", index=i,
        value=binary(BinOp.LOR, binary(BinOp.GE, i, n), gt(load("x", i, I32), const(0)))))
    x = np.array([3, -1, 0], np.int32)
    out = launch_1d(k, [x, np.zeros(64, bool), 3], n=64)["out"]
    assert list(out) == [True, False, False] + [True] * 61


def test_select_evaluates_each_side_only_where_it_is_chosen() -> None:
    # out[i] = x[i] if i < n else y[i - n]: each side would read out of bounds elsewhere.
    value = ir.Select(cond=lt(i, n), a=load("x", i, I32),
                      b=load("y", binary(BinOp.SUB, i, n), I32), type=I32)
    k = kernel([array("x"), array("y"), array("out"), scalar("n")], LET_I,
               ir.Store(array="out", index=i, value=value))
    x, y = np.arange(10, 15, dtype=np.int32), np.arange(100, 103, dtype=np.int32)
    out = sim.simulate(k, [x, y, np.zeros(8, np.int32), 5], grid=(1,), block=(8,))["out"]
    assert list(out) == [10, 11, 12, 13, 14, 100, 101, 102]


def test_while_loops_run_each_invocation_its_own_number_of_trips() -> None:
    # Collatz: count the steps from x[i] to 1.
    v, steps = var("v"), var("steps")
    even = eq(binary(BinOp.REM, v, const(2)), const(0))
    step = ir.Select(cond=even, a=binary(BinOp.DIV, v, const(2)),
                     b=add(mul(v, const(3)), const(1)), type=I32)
    k = kernel([array("x"), array("out"), scalar("n")], LET_I, ir.If(cond=lt(i, n), then=(
        ir.Let(name="v", type=I32, value=load("x", i, I32)),
        ir.Let(name="steps", type=I32, value=const(0)),
        ir.While(cond=binary(BinOp.NE, v, const(1)), body=(
            ir.Assign(name="v", value=step),
            ir.Assign(name="steps", value=add(steps, const(1))),
        )),
        ir.Store(array="out", index=i, value=steps),
    )))
    x = np.arange(1, 40, dtype=np.int32)
    out = launch_1d(k, [x, np.zeros(39, np.int32), 39], block=16)["out"]

    def collatz(a: int) -> int:
        count = 0
        while a != 1:
            a = a // 2 if a % 2 == 0 else 3 * a + 1
            count += 1
        return count

    assert list(out) == [collatz(int(a)) for a in x]


@pytest.mark.parametrize("step", [3, -2])
def test_for_loops_with_bounds_that_differ_between_invocations(step: int) -> None:
    # acc = sum(range(i, stop, step)) with stop = n (step > 0) or -1 (step < 0).
    stop = n if step > 0 else const(-1)
    k = kernel([array("out"), scalar("n")], LET_I, ir.If(cond=lt(i, n), then=(
        ir.Let(name="acc", type=I32, value=const(0)),
        ir.For(var="j", start=i, stop=stop, step=const(step), body=(
            ir.Assign(name="acc", value=add(var("acc"), var("j"))),)),
        ir.Store(array="out", index=i, value=var("acc")),
    )))
    out = launch_1d(k, [np.zeros(20, np.int32), 20], block=8)["out"]
    end = 20 if step > 0 else -1
    assert list(out) == [sum(range(a, end, step)) for a in range(20)]


def test_uniform_for_loop_with_a_negative_step_and_an_empty_loop() -> None:
    # out[0] = sum(range(10, 0, -3)); out[1] = number of trips of range(5, 5)
    k = kernel([array("out")],
               ir.For(var="j", start=const(10), stop=const(0), step=const(-3), body=(
                   ir.Store(array="out", index=const(0),
                            value=add(load("out", const(0), I32), var("j"))),)),
               ir.For(var="q", start=const(5), stop=const(5), step=const(1), body=(
                   ir.Store(array="out", index=const(1), value=const(99)),)))
    out = sim.simulate(k, [np.zeros(2, np.int32)], grid=1, block=1)["out"]
    assert list(out) == [10 + 7 + 4 + 1, 0]


def test_early_return_leaves_the_rest_of_the_kernel_to_the_others() -> None:
    # if x[i] < 0: return;  out[i] = 2 * x[i]
    k = kernel([array("x"), array("out"), scalar("n")], LET_I,
               ir.If(cond=binary(BinOp.GE, i, n), then=(ir.Return(),)),
               ir.If(cond=lt(load("x", i, I32), const(0)), then=(ir.Return(),)),
               ir.Store(array="out", index=i, value=mul(load("x", i, I32), const(2))))
    x = np.array([1, -2, 3, -4, 5], np.int32)
    out = launch_1d(k, [x, np.full(5, 7, np.int32), 5], block=4)["out"]
    assert list(out) == [2, 7, 6, 7, 10]


def test_return_inside_a_loop_ends_the_invocation() -> None:
    # for p in range(10): if p == x[i]: return; out[i] += 1
    k = kernel([array("x"), array("out"), scalar("n")], LET_I,
               ir.If(cond=binary(BinOp.GE, i, n), then=(ir.Return(),)),
               ir.For(var="p", start=const(0), stop=const(10), step=const(1), body=(
                   ir.If(cond=eq(var("p"), load("x", i, I32)), then=(ir.Return(),)),
                   ir.Store(array="out", index=i, value=add(load("out", i, I32), const(1))),
               )))
    x = np.arange(13, dtype=np.int32)
    out = launch_1d(k, [x, np.zeros(13, np.int32), 13], block=4)["out"]
    assert list(out) == [min(a, 10) for a in range(13)]


def test_return_inside_a_loop_with_per_invocation_bounds() -> None:
    # for j in range(0, i): if j == 3: return; out[i] += 1
    k = kernel([array("out"), scalar("n")], LET_I,
               ir.If(cond=binary(BinOp.GE, i, n), then=(ir.Return(),)),
               ir.For(var="j", start=const(0), stop=i, step=const(1), body=(
                   ir.If(cond=eq(var("j"), const(3)), then=(ir.Return(),)),
                   ir.Store(array="out", index=i, value=add(load("out", i, I32), const(1))),
               )),
               ir.Store(array="out", index=i, value=mul(load("out", i, I32), const(10))))
    out = launch_1d(k, [np.zeros(8, np.int32), 8], block=4)["out"]
    assert list(out) == [0, 10, 20, 30, 3, 3, 3, 3]


def test_return_by_every_invocation_ends_the_kernel() -> None:
    k = kernel([array("out")], ir.Return(), ir.Store(array="out", index=const(0), value=const(1)))
    assert sim.simulate(k, [np.zeros(1, np.int32)], grid=2, block=4)["out"][0] == 0


def test_assignment_under_a_branch_changes_only_the_invocations_that_take_it() -> None:
    k = kernel([array("out"), scalar("n")], LET_I, ir.If(cond=lt(i, n), then=(
        ir.Let(name="v", type=I32, value=const(0)),
        ir.If(cond=eq(binary(BinOp.REM, i, const(3)), const(0)),
              then=(ir.Assign(name="v", value=const(5)),),
              orelse=(ir.Assign(name="v", value=i),)),
        ir.Store(array="out", index=i, value=var("v")),
    )))
    out = launch_1d(k, [np.zeros(10, np.int32), 10], block=4)["out"]
    assert list(out) == [5 if a % 3 == 0 else a for a in range(10)]


def test_local_arrays_belong_to_each_invocation_and_start_with_the_canary() -> None:
    loc = ir.ArrayDecl(name="loc", elem=I32, size=4, space=MemSpace.LOCAL)
    k = kernel([array("out"), array("junk"), scalar("n")], LET_I, ir.If(cond=lt(i, n), then=(
        loc,
        ir.For(var="j", start=const(0), stop=const(3), step=const(1), body=(
            ir.Store(array="loc", index=var("j"), value=mul(i, var("j"))),)),
        ir.Store(array="out", index=i,
                 value=add(load("loc", const(2), I32), load("loc", const(1), I32))),
        ir.Store(array="junk", index=i, value=load("loc", const(3), I32)),
    )))
    out = launch_1d(k, [np.zeros(10, np.int32), np.zeros(10, np.int32), 10], block=4)
    assert list(out["out"]) == [3 * a for a in range(10)]
    assert list(out["junk"]) == [0x5A5A5A5A] * 10


def test_thread_and_block_builtins_in_a_3d_launch() -> None:
    names = ["thread_idx", "block_idx", "block_dim", "grid_dim"]
    params = [array(f"{b}_{a}") for b in names for a in "xyz"]
    linear_block = add(builtin(Builtin.BLOCK_IDX_X), mul(builtin(Builtin.GRID_DIM_X), add(
        builtin(Builtin.BLOCK_IDX_Y), mul(builtin(Builtin.GRID_DIM_Y),
                                          builtin(Builtin.BLOCK_IDX_Z)))))
    linear_thread = add(builtin(Builtin.THREAD_IDX_X), mul(builtin(Builtin.BLOCK_DIM_X), add(
        builtin(Builtin.THREAD_IDX_Y), mul(builtin(Builtin.BLOCK_DIM_Y),
                                           builtin(Builtin.THREAD_IDX_Z)))))
    g = add(mul(linear_block, const(2 * 3 * 2)), linear_thread)
    body = [ir.Let(name="g", type=I32, value=g)] + [
        ir.Store(array=f"{b}_{a}", index=var("g"), value=builtin(Builtin(f"{b}.{a}")))
        for b in names for a in "xyz"]
    k = kernel(params, *body)
    grid, block = (3, 1, 2), (2, 3, 2)
    total = 6 * 12
    out = sim.simulate(k, [np.zeros(total, np.int32) for _ in params], grid=grid, block=block)
    bz, by, bx, tz, ty, tx = np.meshgrid(*(np.arange(d) for d in (*grid[::-1], *block[::-1])),
                                         indexing="ij")
    assert np.array_equal(out["thread_idx_x"], tx.ravel())
    assert np.array_equal(out["thread_idx_y"], ty.ravel())
    assert np.array_equal(out["thread_idx_z"], tz.ravel())
    assert np.array_equal(out["block_idx_x"], bx.ravel())
    assert np.array_equal(out["block_idx_y"], by.ravel())
    assert np.array_equal(out["block_idx_z"], bz.ravel())
    assert list(out["block_dim_y"]) == [3] * total
    assert list(out["grid_dim_x"]) == [3] * total
    assert list(out["grid_dim_z"]) == [2] * total


@pytest.mark.parametrize("subgroup", [32, 64])
def test_subgroups_divide_the_linear_thread_index(subgroup: int) -> None:
    linear = add(builtin(Builtin.THREAD_IDX_X), mul(builtin(Builtin.BLOCK_DIM_X),
                                                      builtin(Builtin.THREAD_IDX_Y)))
    g = add(mul(builtin(Builtin.BLOCK_IDX_X), const(96)), linear)
    k = kernel([array("sid"), array("lane"), array("size")],
               ir.Let(name="g", type=I32, value=g),
               ir.Store(array="sid", index=var("g"), value=builtin(Builtin.SUBGROUP_ID)),
               ir.Store(array="lane", index=var("g"), value=builtin(Builtin.SUBGROUP_LANE)),
               ir.Store(array="size", index=var("g"), value=builtin(Builtin.SUBGROUP_SIZE)))
    out = sim.simulate(k, [np.zeros(192, np.int32) for _ in range(3)], grid=2, block=(16, 6),
                       subgroup=subgroup)
    t = np.tile(np.arange(96), 2)
    assert np.array_equal(out["sid"], t // subgroup)
    assert np.array_equal(out["lane"], t % subgroup)
    assert set(out["size"]) == {subgroup}


def test_naive_f32_gemm_accumulates_in_k_order() -> None:
    m, n_, k = 20, 13, 7
    rng = np.random.default_rng(1)
    a = rng.standard_normal(m * k, dtype=np.float32)
    b = rng.standard_normal(k * n_, dtype=np.float32)
    out = sim.simulate(naive_gemm(), [a, b, np.zeros(m * n_, np.float32), m, n_, k],
                       grid=(1, 2), block=(16, 16))["c"]
    want = np.zeros((m, n_), np.float32)
    for p in range(k):  # f32 products and sums, one rounding each, k in order
        want = want + a.reshape(m, k)[:, p:p + 1] * b.reshape(k, n_)[p:p + 1, :]
    assert np.array_equal(out, want.ravel())


def test_naive_i32_gemm_wraps() -> None:
    m = n_ = k = 5
    a = np.full(m * k, 2**20, np.int32)
    b = np.full(k * n_, 2**13 + 1, np.int32)
    out = sim.simulate(naive_gemm(I32), [a, b, np.zeros(m * n_, np.int32), m, n_, k],
                       grid=1, block=(8, 8))["c"]
    exact = k * 2**20 * (2**13 + 1)
    assert set(out) == {(exact + 2**31) % 2**32 - 2**31}


def test_a_loop_that_never_ends_is_a_launch_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import sim.exec_control  # where the loops read the default (sim.execute re-exports it)

    monkeypatch.setattr(sim.exec_control, "MAX_WHILE_TRIPS", 1000)
    forever = kernel([], ir.While(cond=const(True, BOOL), body=()))
    with pytest.raises(LaunchError, match="ran 1000 times without ending"):
        sim.simulate(forever, [], grid=1, block=1)
