"""A uniform loop that accumulates products of loads (``acc = acc + x[i] * y[j]``, indices
affine in the loop variable) runs every trip's loads at once and gives what the general path
gives: the same bits, the same errors and the same race reports. Each case is checked against
the same kernel with the loop's body under an ``if`` that always holds, which the fast path
does not take."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_helpers import (
    F32,
    I32,
    U32,
    add,
    array,
    binary,
    builtin,
    const,
    kernel,
    load,
    mul,
    shared,
    var,
)

import sim
from sarek import ir
from sarek.errors import LimitError, OutOfBounds, SharedRace, SimError
from sarek.ir import BinOp, Builtin, ElemType
from sim import exec_loops
from sim.launch import Limits
from sim.memory import SharedArray

TILE = 4
GRID, BLOCK = (3, 2, 1), (TILE, TILE, 1)
TX, TY = builtin(Builtin.THREAD_IDX_X), builtin(Builtin.THREAD_IDX_Y)
BX, BY = builtin(Builtin.BLOCK_IDX_X), builtin(Builtin.BLOCK_IDX_Y)
ROW, COL = add(mul(BY, const(TILE)), TY), add(mul(BX, const(TILE)), TX)
N = GRID[0] * TILE  # columns of the output, and of every input row
M = GRID[1] * TILE
OUT = add(mul(ROW, const(N)), COL)
KK = var("kk")
OWN = add(mul(TY, const(TILE)), TX)  # the thread's own element of a tile
BARRIER = ir.Barrier()
BOOL_TRUE = ir.Const(value=True, type=ElemType.BOOL)
Body = Callable[[tuple[ir.Stmt, ...]], tuple[ir.Stmt, ...]]
"""How a loop's body is written: as it is, or ``guarded`` (the general path)."""


def sub(a: ir.Expr, b: ir.Expr) -> ir.Binary:
    return binary(BinOp.SUB, a, b)


def guarded(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    """``body`` under an ``if`` that always holds: the general path."""
    return (ir.If(cond=BOOL_TRUE, then=body),)


def accumulate(x: ir.Expr, y: ir.Expr, body: Body, *, t: ElemType = F32,
               start: int = 0, stop: int = TILE, step: int = 1,
               product_first: bool = False, line: int | None = None) -> ir.For:
    """``for kk in range(start, stop, step): acc = acc + x * y`` (``x * y + acc`` with
    ``product_first``), the body written by ``body``."""
    acc, product = var("acc", t), mul(x, y)
    value = add(product, acc) if product_first else add(acc, product)
    return ir.For(var="kk", start=const(start), stop=const(stop), step=const(step),
                  body=body((ir.Assign(name="acc", value=value, line=line),)))


def tiled(loop: ir.For, *, t: ElemType = F32, before: tuple[ir.Stmt, ...] = (BARRIER,),
          after: tuple[ir.Stmt, ...] = (), start: ir.Expr | None = None,
          sa_size: int = TILE * TILE) -> ir.Kernel:
    """Stages a TILE x TILE tile of ``a`` and of ``b`` per block in ``sa`` and ``sb`` (each
    thread its own element), runs ``before``, the loop from ``acc = start`` (0 by default)
    and ``after``, and stores ``acc`` to ``out``."""
    return kernel(
        [array("a", t, readonly=True), array("b", t, readonly=True), array("out", t)],
        shared("sa", sa_size, t), shared("sb", TILE * TILE, t),
        ir.Store(array="sa", index=OWN, value=load("a", OUT, t)),
        ir.Store(array="sb", index=OWN, value=load("b", OUT, t)),
        *before,
        ir.Let(name="acc", type=t, value=const(0 if t.is_int else 0.0, t) if start is None
               else start),
        loop,
        *after,
        ir.Store(array="out", index=OUT, value=var("acc", t)))


def row_times_column(body: Body, **options: Any) -> ir.For:
    """The tiled GEMM's inner loop: ``sa[ty*TILE + kk] * sb[kk*TILE + tx]``."""
    t = options.get("t", F32)
    return accumulate(load("sa", add(mul(TY, const(TILE)), KK), t),
                      load("sb", add(mul(KK, const(TILE)), TX), t), body, **options)


def run(k: ir.Kernel, a: np.ndarray, b: np.ndarray, limits: Limits | None = None
        ) -> np.ndarray:
    out = np.zeros(M * N, a.dtype)
    return sim.simulate(k, {"a": a, "b": b, "out": out}, grid=GRID, block=BLOCK,
                        limits=limits)["out"]


def both(make: Callable[[Body], ir.Kernel]) -> tuple[ir.Kernel, ir.Kernel]:
    return make(lambda body: body), make(guarded)


def same_bits(make: Callable[[Body], ir.Kernel], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    fast, general = (run(k, a, b) for k in both(make))
    assert fast.tobytes() == general.tobytes()
    return fast


def fails_alike(make: Callable[[Body], ir.Kernel], a: np.ndarray, b: np.ndarray,
                error: type[SimError], limits: Limits | None = None, *, in_body: bool = True
                ) -> SimError:
    """The fast and the general path's errors, equal (``in_body``: raised by the loop's
    body, whose path differs by the guard)."""
    caught = []
    for k in both(make):
        with pytest.raises(error) as info:
            run(k, a, b, limits)
        caught.append(info.value)
    fast, general = caught
    statement = f"{fast.statement}.then[0]" if in_body else fast.statement
    assert (fast.detail, statement, fast.line, fast.invocations) == (
        general.detail, general.statement, general.line, general.invocations)
    return fast


SPECIAL = (0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x7F800000, 0xFF800000, 0x3F800000,
           0x7F7FFFFF, 0x7FC00000)
WORDS = st.one_of(st.integers(0, 2**32 - 1), st.sampled_from(SPECIAL),
                  st.integers(0x7F800001, 0x7FFFFFFF), st.integers(0xFF800001, 0xFFFFFFFF))
"""f32 bit patterns, NaNs of every payload and sign often: which operand's payload a sum or a
product keeps tells the operands' order."""


def f32_bits(data: st.DataObject, size: int) -> np.ndarray:
    """``size`` f32 values of any bit pattern (NaN payloads, infinities, subnormals, -0)."""
    words = data.draw(st.lists(WORDS, min_size=size, max_size=size))
    return np.array(words, np.uint32).view(np.float32)


def normals(seed: int, size: int = M * N) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(size).astype(np.float32)


def global_loop(body: Body) -> ir.Kernel:
    """The naive GEMM's loop: ``a[row*N + kk] * b[kk*N + col]``."""
    x = load("a", add(mul(ROW, const(N)), KK), F32)
    y = load("b", add(mul(KK, const(N)), COL), F32)
    return kernel([array("a", F32, readonly=True), array("b", F32, readonly=True),
                   array("out", F32)],
                  ir.Let(name="acc", type=F32, value=const(0.0, F32)),
                  accumulate(x, y, body, stop=M),
                  ir.Store(array="out", index=OUT, value=var("acc", F32)))


# --------------------------------------------------------------------------- values


@settings(max_examples=30, deadline=None)
@given(data=st.data(), product_first=st.booleans())
def test_a_loop_over_shared_tiles_gives_the_general_paths_bits(data: st.DataObject,
                                                                product_first: bool) -> None:
    a, b = f32_bits(data, M * N), f32_bits(data, M * N)
    same_bits(lambda body: tiled(row_times_column(body, product_first=product_first)), a, b)


def test_a_loop_over_shared_tiles_gives_the_sequential_sums() -> None:
    a, b = normals(0), normals(1)
    out = run(tiled(row_times_column(lambda body: body)), a, b).reshape(M, N)
    ta, tb = a.reshape(M, N), b.reshape(M, N)
    for r, c in ((0, 0), (5, 9), (M - 1, N - 1)):
        acc = np.float32(0.0)
        for kk in range(TILE):
            acc = acc + ta[r, c // TILE * TILE + kk] * tb[r // TILE * TILE + kk, c]
        assert out[r, c].tobytes() == acc.tobytes()


@pytest.mark.parametrize(("start", "stop", "step"), [(TILE - 1, -1, -1), (1, TILE, 2),
                                                     (0, 1, 1), (3, 0, -2)],
                         ids=["backwards", "every-other", "one-trip", "backwards-by-two"])
def test_any_uniform_range_gives_the_general_paths_bits(start: int, stop: int, step: int
                                                        ) -> None:
    same_bits(lambda body: tiled(row_times_column(body, start=start, stop=stop, step=step)),
              normals(2), normals(3))


def test_an_integer_accumulation_wraps_as_the_general_path() -> None:
    a = np.random.default_rng(4).integers(-2**31, 2**31, M * N).astype(np.int32)
    b = np.random.default_rng(5).integers(-2**31, 2**31, M * N).astype(np.int32)
    same_bits(lambda body: tiled(row_times_column(body, t=I32), t=I32), a, b)


def test_an_index_whose_arithmetic_wraps_gives_the_general_paths_bits() -> None:
    # kk * 2^30 * 4 wraps to 0 in i32: the index is sa[ty*TILE + kk*(1 + 2^32)] = ty*TILE + kk
    huge = mul(mul(KK, const(1 << 30)), const(4))
    x = load("sa", add(add(mul(TY, const(TILE)), KK), huge), F32)
    y = load("sb", sub(add(mul(KK, const(TILE)), TX), huge), F32)
    same_bits(lambda body: tiled(accumulate(x, y, body)), normals(6), normals(7))


def test_an_unsigned_index_that_decreases_gives_the_general_paths_bits() -> None:
    # u32 indices: the step between trips is 2^32 - 1, which wraps to -1
    def u(e: ir.Expr) -> ir.Cast:
        return ir.Cast(x=e, type=U32)
    x = load("sa", sub(u(add(mul(TY, const(TILE)), const(TILE - 1))), u(KK)), F32)
    y = load("sb", add(mul(u(KK), const(TILE, U32)), u(TX)), F32)
    same_bits(lambda body: tiled(accumulate(x, y, body)), normals(8), normals(9))


def test_a_loop_over_global_arrays_gives_the_general_paths_bits() -> None:
    same_bits(global_loop, normals(10), normals(11))


def test_an_accumulator_over_the_launch_gives_the_general_paths_bits() -> None:
    same_bits(lambda body: tiled(row_times_column(body), start=load("a", OUT, F32)),
              normals(12), normals(13))


def test_an_accumulator_over_more_axes_than_the_products_gives_the_general_paths_bits(
        ) -> None:
    # each product depends on the row only; the accumulator starts from every invocation's own
    def make(body: Body) -> ir.Kernel:
        x = load("a", add(mul(ROW, const(N)), KK), F32)
        return kernel([array("a", F32, readonly=True), array("b", F32, readonly=True),
                       array("out", F32)],
                      ir.Let(name="acc", type=F32, value=load("b", OUT, F32)),
                      accumulate(x, x, body, stop=N),
                      ir.Store(array="out", index=OUT, value=var("acc", F32)))
    same_bits(make, normals(34), normals(35))


def test_a_loop_run_again_with_other_variables_gives_the_general_paths_bits() -> None:
    # the inner loop's index moves with the outer loop's variable and with an assigned one
    x = load("sa", add(add(mul(TY, const(TILE)), KK), add(var("t"), var("shift"))), F32)
    y = load("sb", add(mul(KK, const(TILE)), TX), F32)
    def make(body: Body) -> ir.Kernel:
        outer = ir.For(var="t", start=const(0), stop=const(3), step=const(1), body=(
            accumulate(x, y, body),
            ir.Assign(name="shift", value=sub(const(1), var("shift")))))
        k = tiled(outer, sa_size=TILE * TILE + TILE)
        return k.model_copy(update={"body": (ir.Let(name="shift", type=I32, value=const(0)),
                                             *k.body)})
    same_bits(make, normals(32), normals(33))


def test_long_loops_run_in_batches_of_trips_with_the_same_bits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exec_loops, "TRIP_ELEMENTS", 100)  # a batch of one or two trips
    test_a_loop_over_global_arrays_gives_the_general_paths_bits()


# --------------------------------------------------------------------------- errors


def test_an_index_out_of_bounds_at_a_later_trip_fails_as_the_general_path() -> None:
    # sb[kk*5 + tx] leaves the tile at the fourth trip, sa[ty*TILE + kk] at the fifth
    y = load("sb", add(mul(KK, const(5)), TX), F32)
    err = fails_alike(lambda body: tiled(accumulate(load("sa", add(mul(TY, const(TILE)), KK),
                                                         F32), y, body, stop=TILE + 1,
                                                    line=29)),
                      normals(14), normals(15), OutOfBounds)
    assert err.detail == "index 16 is outside shared array 'sb' of 16 elements"
    assert err.line == 29


def test_a_global_index_out_of_bounds_fails_as_the_general_path() -> None:
    def make(body: Body) -> ir.Kernel:
        x = load("a", add(mul(ROW, const(N)), KK), F32)
        return kernel([array("a", F32, readonly=True), array("b", F32, readonly=True),
                       array("out", F32)],
                      ir.Let(name="acc", type=F32, value=const(0.0, F32)),
                      accumulate(x, x, body, start=-2, stop=N),
                      ir.Store(array="out", index=OUT, value=var("acc", F32)))
    err = fails_alike(make, normals(16), normals(17), OutOfBounds)
    assert err.detail == "index -2 is outside global array 'a' of 96 elements"


def test_reads_racing_in_one_trip_are_reported_for_the_first_operand() -> None:
    err = fails_alike(lambda body: tiled(row_times_column(body), before=()),
                      normals(18), normals(19), SharedRace)
    assert err.detail.startswith("read-after-write race on shared array 'sa' element 0")


def test_a_race_at_an_earlier_trip_is_reported_first() -> None:
    # sa[own + kk] is the thread's own element at the first trip and races from the second;
    # sb[kk*TILE + tx] races from the first (thread (0, 1) reads what thread (0, 0) wrote)
    x = load("sa", add(OWN, KK), F32)
    err = fails_alike(lambda body: tiled(accumulate(x, load("sb", add(mul(KK, const(TILE)), TX),
                                                             F32), body),
                                         before=(), sa_size=TILE * TILE + TILE),
                      normals(18), normals(19), SharedRace)
    assert err.detail.startswith("read-after-write race on shared array 'sb' element 0")


def test_a_later_write_to_what_the_loop_read_races_as_the_general_path() -> None:
    rewrite = ir.Store(array="sa", index=OWN, value=const(1.0, F32))
    err = fails_alike(lambda body: tiled(row_times_column(body), after=(rewrite,)),
                      normals(20), normals(21), SharedRace, in_body=False)
    assert err.detail.startswith("write-after-read race on shared array 'sa' element 0")


def test_reading_what_the_same_thread_wrote_is_no_race() -> None:
    own = load("sa", OWN, F32)
    same_bits(lambda body: tiled(accumulate(own, own, body), before=()), normals(22),
              normals(23))


def test_a_launch_that_runs_out_of_trips_in_the_loop_fails_as_the_general_path() -> None:
    err = fails_alike(lambda body: tiled(row_times_column(body)), normals(24), normals(25),
                      LimitError, Limits(trips=TILE - 1), in_body=False)
    assert isinstance(err, LimitError) and err.limit == "trips"


# --------------------------------------------------------------------------- taken


def test_the_tiled_and_the_naive_loop_take_the_fast_path(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    calls: list[str] = []
    original = exec_loops.Loops._products
    def counted(self: exec_loops.Loops, *args: Any) -> Any:
        calls.append("fast")
        return original(self, *args)
    monkeypatch.setattr(exec_loops.Loops, "_products", counted)
    run(tiled(row_times_column(lambda body: body)), normals(26), normals(27))
    run(global_loop(lambda body: body), normals(26), normals(27))
    assert calls == ["fast", "fast"]
    calls.clear()
    run(tiled(row_times_column(guarded)), normals(26), normals(27))
    run(global_loop(guarded), normals(26), normals(27))
    assert calls == []


def test_the_fast_path_logs_each_operands_reads_once(monkeypatch: pytest.MonkeyPatch) -> None:
    logged: list[int] = []
    original = SharedArray.read_repeated
    def counted(self: SharedArray, at: Any, threads: np.ndarray) -> None:
        logged.append(at.trips)
        original(self, at, threads)
    monkeypatch.setattr(SharedArray, "read_repeated", counted)
    run(tiled(row_times_column(lambda body: body)), normals(28), normals(29))
    assert logged == [TILE, TILE]
