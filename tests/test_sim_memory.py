"""Shared memory, barriers and the simulator's detectors: out-of-bounds accesses, races
between barriers and barriers that part of a block misses."""

from __future__ import annotations

import numpy as np
import pytest
from sim_helpers import (
    F32,
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
    scalar,
    shared,
    tid,
    var,
)

import sim
from sarek import ir
from sarek.errors import BarrierDivergence, OutOfBounds, SharedRace
from sarek.ir import BinOp, Builtin, MemSpace

i, n, t = var("i"), var("n"), var("t")
LET_I = ir.Let(name="i", type=I32, value=tid())
LET_T = ir.Let(name="t", type=I32, value=builtin(Builtin.THREAD_IDX_X))
BARRIER = ir.Barrier()
BLOCK = builtin(Builtin.BLOCK_DIM_X)


def rem(a: ir.Expr, b: ir.Expr) -> ir.Binary:
    return binary(BinOp.REM, a, b)


def neighbour() -> ir.Expr:
    """``(t + 1) % block_dim.x``"""
    return rem(add(t, const(1)), BLOCK)


def run(k: ir.Kernel, *arrays: np.ndarray, grid: int = 2, block: int = 8
        ) -> dict[str, np.ndarray]:
    return sim.simulate(k, list(arrays), grid=grid, block=block)


# --------------------------------------------------------------------------- shared memory


def test_shared_staging_with_barriers_reverses_each_block() -> None:
    # Each block of (8, 4) invocations reverses its 32 elements through shared memory.
    linear = add(builtin(Builtin.THREAD_IDX_X), mul(const(8), builtin(Builtin.THREAD_IDX_Y)))
    base = mul(builtin(Builtin.BLOCK_IDX_X), const(32))
    k = kernel([array("x", F32), array("out", F32)],
               shared("tile", 32, F32),
               ir.Let(name="t", type=I32, value=linear),
               ir.Store(array="tile", index=t, value=load("x", add(base, t), F32)),
               BARRIER,
               ir.Store(array="out", index=add(base, t),
                        value=load("tile", binary(BinOp.SUB, const(31), t), F32)))
    x = np.arange(5 * 32, dtype=np.float32)
    out = sim.simulate(k, [x, np.zeros_like(x)], grid=5, block=(8, 4))["out"]
    assert np.array_equal(out, x.reshape(5, 32)[:, ::-1].ravel())


def test_each_block_has_its_own_copy_of_a_shared_array() -> None:
    k = kernel([array("out")], shared("s", 1), LET_T, LET_I,
               ir.If(cond=binary(BinOp.EQ, t, const(0)), then=(
                   ir.Store(array="s", index=const(0), value=builtin(Builtin.BLOCK_IDX_X)),)),
               BARRIER,
               ir.Store(array="out", index=i, value=load("s", const(0), I32)))
    out = run(k, np.zeros(24, np.int32), grid=3)["out"]
    assert list(out) == [b for b in range(3) for _ in range(8)]


def test_shared_arrays_start_with_the_canary() -> None:
    k = kernel([array("f", F32), array("g")], shared("sf", 4, F32), shared("sg", 4), LET_I,
               ir.Store(array="f", index=i, value=load("sf", const(1), F32)),
               ir.Store(array="g", index=i, value=load("sg", const(2), I32)))
    out = run(k, np.zeros(2, np.float32), np.zeros(2, np.int32), grid=1, block=2)
    assert np.all(np.isnan(out["f"]))
    assert list(out["g"]) == [0x5A5A5A5A] * 2


def test_a_thread_may_read_and_rewrite_its_own_element_between_barriers() -> None:
    k = kernel([array("out")], shared("s", 8), LET_T, LET_I,
               ir.Store(array="s", index=t, value=t),
               ir.Store(array="s", index=t, value=add(load("s", t, I32), const(1))),
               BARRIER,
               ir.Store(array="out", index=i, value=load("s", neighbour(), I32)))
    out = run(k, np.zeros(16, np.int32))["out"]
    assert list(out) == [(a + 1) % 8 + 1 for a in range(8)] * 2


def test_reads_then_a_barrier_then_writes_are_not_a_race() -> None:
    k = kernel([array("out")], shared("s", 8), LET_T, LET_I,
               ir.Store(array="s", index=t, value=t),
               BARRIER,
               ir.Let(name="v", type=I32, value=load("s", neighbour(), I32)),
               BARRIER,
               ir.Store(array="s", index=t, value=var("v")),
               BARRIER,
               ir.Store(array="out", index=i, value=load("s", t, I32)))
    assert list(run(k, np.zeros(16, np.int32))["out"]) == [(a + 1) % 8 for a in range(8)] * 2


# --------------------------------------------------------------------------- races


def race(k: ir.Kernel) -> SharedRace:
    with pytest.raises(SharedRace) as info:
        run(k, np.zeros(16, np.int32))
    return info.value


def test_two_lanes_of_one_store_writing_one_element_race() -> None:
    err = race(kernel([array("out")], shared("s", 8), LET_T,
                      ir.Store(array="s", index=const(3), value=t, line=12)))
    assert "write/write race on shared array 's' element 3" in err.detail
    assert err.statement == "body[2]" and err.line == 12
    assert err.invocations == tuple(((0, 0, 0), (x, 0, 0)) for x in range(8))


def test_a_race_under_a_branch_names_the_invocations_that_take_it() -> None:
    err = race(kernel([array("out")], shared("s", 8), LET_T,
                      ir.If(cond=binary(BinOp.GE, t, const(5)), then=(
                          ir.Store(array="s", index=const(0), value=t),))))
    assert err.statement == "body[2].then[0]"
    assert err.invocations == tuple(((b, 0, 0), (x, 0, 0)) for b in (0, 1) for x in (5, 6, 7))


def test_reading_an_element_another_thread_wrote_without_a_barrier_races() -> None:
    err = race(kernel([array("out")], shared("s", 8), LET_T, LET_I,
                      ir.Store(array="s", index=t, value=t),
                      ir.Store(array="out", index=i, value=load("s", neighbour(), I32))))
    assert err.detail.startswith("read-after-write race on shared array 's' element 1 in "
                                 "block (0, 0, 0)")
    assert "thread (1, 0, 0) wrote it and thread (0, 0, 0) reads it" in err.detail
    assert err.statement == "body[4]"
    assert err.invocations == tuple(((0, 0, 0), (x, 0, 0)) for x in range(8))


def test_writing_an_element_another_thread_read_without_a_barrier_races() -> None:
    err = race(kernel([array("out")], shared("s", 8), LET_T,
                      ir.Store(array="s", index=t, value=t),
                      BARRIER,
                      ir.Let(name="v", type=I32, value=load("s", neighbour(), I32)),
                      ir.Store(array="s", index=t, value=var("v"))))
    assert err.detail.startswith("write-after-read race on shared array 's' element 0")
    assert "thread (7, 0, 0) read it and thread (0, 0, 0) writes it" in err.detail
    assert err.statement == "body[5]"


def test_writing_an_element_another_thread_wrote_without_a_barrier_races() -> None:
    err = race(kernel([array("out")], shared("s", 8), LET_T,
                      ir.Store(array="s", index=t, value=t),
                      ir.Store(array="s", index=neighbour(), value=t)))
    assert err.detail.startswith("write-after-write race on shared array 's' element 1")
    assert err.statement == "body[3]"


def test_a_barrier_only_ends_the_epoch_of_the_blocks_that_reached_it() -> None:
    # Block 1 skips the barrier entirely (a uniform branch), so its neighbour read races.
    skip = binary(BinOp.EQ, builtin(Builtin.BLOCK_IDX_X), const(0))
    err = race(kernel([array("out")], shared("s", 8), LET_T, LET_I,
                      ir.Store(array="s", index=t, value=t),
                      ir.If(cond=skip, then=(BARRIER,)),
                      ir.Store(array="out", index=i, value=load("s", neighbour(), I32))))
    assert "in block (1, 0, 0)" in err.detail
    assert err.invocations[0] == ((1, 0, 0), (0, 0, 0))


# --------------------------------------------------------------------------- bounds


def test_out_of_bounds_load_names_the_array_index_size_statement_and_invocations() -> None:
    k = kernel([array("x"), array("out"), scalar("n")], LET_I, ir.If(cond=lt(i, n), then=(
        ir.Store(array="out", index=i, value=load("x", add(i, const(3)), I32), line=42),)))
    with pytest.raises(OutOfBounds) as info:
        launch_1d(k, [np.zeros(10, np.int32), np.zeros(10, np.int32), 10], block=4)
    err = info.value
    assert err.detail == "index 10 is outside global array 'x' of 10 elements"
    assert err.statement == "body[1].then[0]" and err.line == 42
    assert err.invocations == (((1, 0, 0), (3, 0, 0)), ((2, 0, 0), (0, 0, 0)),
                               ((2, 0, 0), (1, 0, 0)))


def test_out_of_bounds_store_is_detected() -> None:
    k = kernel([array("out")], LET_I, ir.Store(array="out", index=binary(
        BinOp.SUB, i, const(1)), value=i))
    with pytest.raises(OutOfBounds) as info:
        run(k, np.zeros(16, np.int32))
    assert info.value.detail == "index -1 is outside global array 'out' of 16 elements"
    assert info.value.invocations == (((0, 0, 0), (0, 0, 0)),)


def test_out_of_bounds_shared_and_local_accesses_are_detected() -> None:
    k = kernel([array("out")], shared("s", 4), LET_T,
               ir.Store(array="s", index=t, value=t))
    with pytest.raises(OutOfBounds, match="index 4 is outside shared array 's' of 4"):
        run(k, np.zeros(16, np.int32))
    loc = ir.ArrayDecl(name="loc", elem=I32, size=2, space=MemSpace.LOCAL)
    k = kernel([array("out")], loc, LET_I,
               ir.Store(array="out", index=i, value=load("loc", const(2), I32)))
    with pytest.raises(OutOfBounds, match="index 2 is outside local array 'loc' of 2"):
        run(k, np.zeros(16, np.int32))


def test_accesses_in_a_branch_no_invocation_takes_never_fault() -> None:
    k = kernel([array("out")], LET_I, ir.If(cond=lt(i, const(0)), then=(
        ir.Store(array="out", index=const(1000), value=load("out", const(-5), I32)),)))
    assert list(run(k, np.ones(4, np.int32), grid=1, block=4)["out"]) == [1] * 4


# --------------------------------------------------------------------------- barriers


def per_invocation_flag() -> list[ir.Stmt]:
    """A local array holding ``thread_idx.x % 2``: its loads look uniform to the static
    divergence check, so only the simulator sees that they differ."""
    return [ir.ArrayDecl(name="flag", elem=I32, size=1, space=MemSpace.LOCAL),
            ir.Store(array="flag", index=const(0), value=rem(t, const(2)))]


def test_a_barrier_reached_by_part_of_a_block_is_divergent() -> None:
    k = kernel([array("out")], LET_T, *per_invocation_flag(), ir.If(
        cond=binary(BinOp.EQ, load("flag", const(0), I32), const(1)),
        then=(ir.Barrier(line=9),)))
    with pytest.raises(BarrierDivergence) as info:
        run(k, np.zeros(16, np.int32))
    err = info.value
    assert err.detail.startswith("4 of the 8 invocations of block (0, 0, 0) reached")
    assert err.statement == "body[3].then[0]" and err.line == 9
    assert err.invocations == tuple(((0, 0, 0), (x, 0, 0)) for x in (1, 3, 5, 7))


def test_invocations_that_returned_do_not_reach_a_later_barrier() -> None:
    k = kernel([array("out")], LET_T, *per_invocation_flag(),
               ir.If(cond=binary(BinOp.EQ, load("flag", const(0), I32), const(1)),
                     then=(ir.Return(),)),
               BARRIER)
    with pytest.raises(BarrierDivergence, match="4 of the 8 invocations"):
        run(k, np.zeros(16, np.int32))


def test_blocks_that_entirely_skip_a_barrier_do_not_take_part() -> None:
    k = kernel([array("out")], LET_I,
               ir.If(cond=binary(BinOp.EQ, builtin(Builtin.BLOCK_IDX_X), const(1)),
                     then=(ir.Return(),)),
               BARRIER,
               ir.Store(array="out", index=i, value=const(1)))
    assert list(run(k, np.zeros(16, np.int32))["out"]) == [1] * 8 + [0] * 8
