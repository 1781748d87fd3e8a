"""The simulator's memory fast paths give what the general paths give: shared accesses at an
index affine in the thread coordinates (strided views, no index array), stores in which no
two invocations meet (no order to keep), and values computed into reused buffers or laid out
for speed. Each is checked against the same kernel with its indices made to depend on every
axis of the launch, which takes the general path: the same values, races and reports."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_helpers import I32, add, array, binary, builtin, const, kernel, load, lt, mul, var

import sim
from sarek import ir
from sarek.errors import SharedRace
from sarek.ir import BinOp, Builtin, MemSpace
from sim.memory import SharedArray
from sim.state import POOLED_BYTES, SMALL, Buffers, combine

GRID, BLOCK = (2, 3, 1), (4, 5, 1)
TX, TY = builtin(Builtin.THREAD_IDX_X), builtin(Builtin.THREAD_IDX_Y)
BX, BY = builtin(Builtin.BLOCK_IDX_X), builtin(Builtin.BLOCK_IDX_Y)
LIN = add(mul(TY, const(4)), TX)  # the thread's linear index, 0 to 19
ID = add(mul(add(mul(BY, const(2)), BX), const(20)), LIN)  # the invocation, 0 to 119
BARRIER = ir.Barrier()
Index = Callable[[ir.Expr], ir.Expr]
"""How a kernel's indices are made: as they are, or ``everywhere``."""
Make = Callable[[Index], ir.Kernel]


def sub(a: ir.Expr, b: ir.Expr) -> ir.Binary:
    return binary(BinOp.SUB, a, b)


def everywhere(e: ir.Expr) -> ir.Expr:
    """``e`` as a value over every axis of the launch (the general path)."""
    return add(e, sub(ID, ID))


def shared_kernel(*body: ir.Stmt) -> ir.Kernel:
    """``body`` after the declaration of ``s``, 20 i32 per block."""
    return kernel([array("a", I32, readonly=True), array("out", I32)],
                  ir.ArrayDecl(name="s", elem=I32, size=20, space=MemSpace.SHARED), *body)


def run(k: ir.Kernel) -> dict[str, np.ndarray]:
    a = np.arange(120, dtype=np.int32) * 7 + 3
    return sim.simulate(k, {"a": a, "out": np.full(120, -1, np.int32)}, grid=GRID,
                        block=BLOCK)


def both(make: Make) -> tuple[ir.Kernel, ir.Kernel]:
    """``make(index)`` with indices as they are and with indices over every axis."""
    return make(lambda e: e), make(everywhere)


def race(k: ir.Kernel) -> SharedRace:
    with pytest.raises(SharedRace) as info:
        run(k)
    return info.value


def races_alike(make: Make) -> SharedRace:
    fast, general = (race(k) for k in both(make))
    assert (fast.detail, fast.statement, fast.line, fast.invocations) == (
        general.detail, general.statement, general.line, general.invocations)
    return fast


def stage_and_read(read: ir.Expr) -> Make:
    def make(at: Index) -> ir.Kernel:
        return shared_kernel(
            ir.Store(array="s", index=at(LIN), value=load("a", ID, I32)),
            BARRIER,
            ir.Store(array="out", index=ID, value=load("s", at(read), I32)))
    return make


@pytest.mark.parametrize("read", [LIN, sub(const(19), LIN), add(mul(TX, const(5)), TY),
                                  TX, mul(TY, const(4)), const(7)],
                         ids=["same", "reversed", "transposed", "row", "column", "one"])
def test_a_strided_store_and_load_give_the_general_paths_values(read: ir.Expr) -> None:
    fast, general = (run(k)["out"] for k in both(stage_and_read(read)))
    assert np.array_equal(fast, general)


def test_a_strided_load_reads_each_blocks_own_copy() -> None:
    out = run(stage_and_read(sub(const(19), LIN))(lambda e: e))["out"]
    ids = np.arange(120)
    assert np.array_equal(out, (ids // 20 * 20 + 19 - ids % 20) * 7 + 3)


def test_a_masked_strided_store_writes_only_the_active_invocations() -> None:
    def make(at: Index) -> ir.Kernel:
        return shared_kernel(
            ir.If(cond=lt(TX, const(2)), then=(
                ir.Store(array="s", index=at(LIN), value=ID),)),
            BARRIER,
            ir.Store(array="out", index=ID, value=load("s", at(LIN), I32)))
    fast, general = (run(k)["out"] for k in both(make))
    assert np.array_equal(fast, general)
    assert fast[0] == 0 and fast[2] == 0x5A5A5A5A  # written; left as the canary


def test_a_store_at_a_permutation_of_the_threads_gives_the_general_paths_values() -> None:
    permuted = binary(BinOp.REM, mul(LIN, const(3)), const(20))  # distinct, not affine
    def make(at: Index) -> ir.Kernel:
        return shared_kernel(
            ir.Store(array="s", index=at(permuted), value=ID),
            BARRIER,
            ir.Store(array="out", index=ID, value=load("s", at(LIN), I32)))
    fast, general = (run(k)["out"] for k in both(make))
    assert np.array_equal(fast, general)


def test_a_strided_read_of_what_another_thread_wrote_races_as_the_general_one() -> None:
    err = races_alike(lambda at: shared_kernel(
        ir.Store(array="s", index=at(LIN), value=ID),
        ir.Store(array="out", index=ID, value=load("s", at(sub(const(19), LIN)), I32),
                 line=7)))
    assert err.detail.startswith("read-after-write race on shared array 's' element 19")
    assert err.line == 7


def test_a_strided_write_after_strided_reads_races_as_the_general_one() -> None:
    err = races_alike(lambda at: shared_kernel(
        ir.Let(name="v", type=I32, value=load("s", at(sub(const(19), LIN)), I32)),
        ir.Store(array="s", index=at(LIN), value=var("v"))))
    assert err.detail.startswith("write-after-read race on shared array 's' element 0")


def test_a_strided_write_after_another_threads_write_races_as_the_general_one() -> None:
    err = races_alike(lambda at: shared_kernel(
        ir.Store(array="s", index=at(LIN), value=ID),
        ir.Store(array="s", index=at(add(mul(TX, const(5)), TY)), value=ID)))
    assert err.detail.startswith("write-after-write race on shared array 's' element 5")


def test_a_masked_strided_write_after_reads_races_only_where_active() -> None:
    # threads with tx >= 2 rewrite s[lin], which thread 19 - lin read: every one a race
    err = races_alike(lambda at: shared_kernel(
        ir.Let(name="v", type=I32, value=load("s", at(sub(const(19), LIN)), I32)),
        ir.If(cond=binary(BinOp.GE, TX, const(2)), then=(
            ir.Store(array="s", index=at(LIN), value=var("v")),))))
    assert err.detail.startswith("write-after-read race on shared array 's' element 2")


def test_a_permuted_write_after_another_threads_write_races_as_the_general_one() -> None:
    permuted = binary(BinOp.REM, mul(LIN, const(3)), const(20))
    err = races_alike(lambda at: shared_kernel(
        ir.Store(array="s", index=at(LIN), value=ID),
        ir.Store(array="s", index=at(permuted), value=ID)))
    assert err.detail.startswith("write-after-write race on shared array 's' element 3")


# --------------------------------------------------------------------------- buffers


def test_a_buffer_is_handed_out_again_only_when_nothing_refers_to_it() -> None:
    pool, f32 = Buffers(), np.dtype(np.float32)
    first = pool.empty((1000,), f32)
    address = first.ctypes.data
    second = pool.empty((1000,), f32)
    assert not np.shares_memory(first, second)
    view = first[::2].T
    del first
    third = pool.empty((1000,), f32)
    assert not np.shares_memory(third, view)  # a view keeps its buffer in use
    del view
    assert pool.empty((10, 100), f32).ctypes.data == address


def test_a_buffer_holds_any_element_type() -> None:
    pool = Buffers()
    for dtype in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.bool_)):
        out = pool.empty((3, 1000), dtype)
        assert out.dtype == dtype and out.shape == (3, 1000) and out.flags.c_contiguous


def test_past_its_limit_the_pool_allocates_fresh_storage() -> None:
    pool = Buffers(limit=4000)
    kept = pool.empty((1000,), np.dtype(np.float32))
    address = kept.ctypes.data
    del kept
    extra = pool.empty((1000,), np.dtype(np.int32))
    assert extra.ctypes.data == address
    assert not np.shares_memory(extra, pool.empty((1000,), np.dtype(np.int32)))


EXTENTS = (2, 4, 8, 4, 16, 8)
AXES = st.tuples(*(st.sampled_from((1, e)) for e in EXTENTS))


@settings(max_examples=150, deadline=None)
@given(a_axes=AXES, b_axes=AXES, op=st.sampled_from((np.add, np.multiply, np.less)),
       scalar=st.sampled_from((None, "a", "b")), permute=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_combine_gives_numpys_values_in_any_layout(
        a_axes: tuple[int, ...], b_axes: tuple[int, ...], op: np.ufunc, scalar: str | None,
        permute: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a: Any = rng.standard_normal(a_axes).astype(np.float32)
    b: Any = rng.standard_normal(b_axes).astype(np.float32)
    if permute:  # an operand laid out in another order, as an earlier combine leaves it
        a = np.ascontiguousarray(a.transpose(0, 3, 1, 4, 2, 5)).transpose(0, 2, 4, 1, 3, 5)
    if scalar == "a":
        a = np.float32(1.5)
    elif scalar == "b":
        b = np.float32(-2.25)
    pool = Buffers()
    got = combine(op, a, b, pool)
    again = combine(op, a, b, pool)  # from reused storage while ``got`` is alive
    want = op(a, b)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert np.asarray(got).tobytes() == np.asarray(want).tobytes()  # every bit
    assert np.array_equal(np.asarray(again), np.asarray(want))


@settings(max_examples=80, deadline=None)
@given(a_axes=AXES, b_axes=AXES, c_axes=AXES, seed=st.integers(0, 2**32 - 1))
def test_a_temporary_taking_the_next_result_gives_numpys_values(
        a_axes: tuple[int, ...], b_axes: tuple[int, ...], c_axes: tuple[int, ...],
        seed: int) -> None:
    # acc + a*b: the product, which nothing else holds, may take the sum
    rng = np.random.default_rng(seed)
    a, b, c = (rng.standard_normal(axes).astype(np.float32) for axes in (a_axes, b_axes, c_axes))
    pool = Buffers()
    held = combine(np.multiply, a, b, pool)
    got = combine(np.add, c, combine(np.multiply, a, b, pool), pool, (False, True))
    again = combine(np.subtract, combine(np.multiply, a, b, pool), held, pool, (True, False))
    assert np.asarray(got).tobytes() == (c + a * b).tobytes()
    assert np.asarray(held).tobytes() == (a * b).tobytes()  # held: never taken
    assert not np.any(again)


def test_an_operand_not_named_a_temporary_is_never_written() -> None:
    a = np.random.default_rng(0).standard_normal((2, 4, 8, 4, 16, 8)).astype(np.float32)
    pool = Buffers()
    product = combine(np.multiply, a, a, pool)
    kept = np.array(product, copy=True)
    combine(np.add, product, product, pool)
    assert np.array_equal(product, kept)


def test_combine_covers_results_past_the_pooled_bound() -> None:
    # the strategy's largest f32 result reaches the pooled paths
    assert math.prod(EXTENTS) * 4 >= POOLED_BYTES and math.prod(EXTENTS) >= SMALL


@pytest.mark.parametrize(("a_axes", "b_axes"), [
    ((1, 4, 8, 1, 16, 1), (1, 4, 8, 1, 1, 8)),  # an outer product per block
    ((1, 4, 1, 1, 16, 1), (1, 1, 8, 1, 1, 8)),  # rows times columns
    ((2, 4, 8, 4, 16, 8), (1, 4, 8, 1, 1, 1)),  # the whole launch and a part
])
def test_combine_gives_numpys_values_for_the_gemm_shapes(a_axes: tuple[int, ...],
                                                        b_axes: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal(a_axes).astype(np.float32)
    b = rng.standard_normal(b_axes).astype(np.float32)
    pool = Buffers()
    product = combine(np.multiply, a, b, pool)
    total = combine(np.add, product, product, pool)
    assert np.array_equal(product, a * b) and np.array_equal(total, a * b + a * b)


def test_the_fast_kernels_take_the_strided_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    for name in ("read_strided", "write_strided", "write_distinct"):
        original = getattr(SharedArray, name)
        def counted(self: SharedArray, *args: Any, _name: str = name,
                    _original: Callable[..., None] = original) -> None:
            calls.append(_name)
            _original(self, *args)
        monkeypatch.setattr(SharedArray, name, counted)
    run(stage_and_read(sub(const(19), LIN))(lambda e: e))
    permuted = binary(BinOp.REM, mul(LIN, const(3)), const(20))
    run(shared_kernel(ir.Store(array="s", index=permuted, value=ID)))
    assert calls == ["write_strided", "read_strided", "write_distinct"]
    calls.clear()
    run(stage_and_read(sub(const(19), LIN))(everywhere))
    assert calls == []
