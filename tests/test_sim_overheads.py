"""What the simulator skips to save time on small launches never changes what it gives: a kernel
is validated once per identity yet refused on every call while invalid; a launch that comes
again runs the program compiled for it the first time, on its own new arguments, and hands
back arrays of its own; a binary operation whose operands are the objects of its last
evaluation gives its last result, which follows its operands as soon as they change."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from sim_helpers import BOOL, F32, I32, add, array, builtin, const, kernel, mul, var

import sim
from sarek import ir
from sarek.errors import IRError, OutOfBounds
from sarek.ir import Builtin
from sim.state import Buffers

TX = builtin(Builtin.THREAD_IDX_X)


def test_an_invalid_kernel_is_refused_on_every_call() -> None:
    k = kernel([array("out")], ir.Store(array="out", index=const(0), value=var("nowhere")))
    for _ in range(2):
        with pytest.raises(IRError):
            sim.simulate(k, [np.zeros(1, np.int32)])


PLUS_ONE = kernel([array("x"), array("out")],
                  ir.Store(array="out", index=TX, value=add(ir.Load(array="x", index=TX,
                                                                     type=I32), const(1))))


def test_a_launch_that_comes_again_runs_on_its_new_arguments() -> None:
    for start in (0, 10, 0):
        x = np.arange(start, start + 4, dtype=np.int32)
        out = sim.simulate(PLUS_ONE, [x, np.full(4, -1, np.int32)], block=4)
        assert np.array_equal(out["out"], x + 1) and np.array_equal(out["x"], x)


def test_each_call_hands_back_arrays_of_its_own() -> None:
    args = [np.arange(4, dtype=np.int32), np.zeros(4, np.int32)]
    first = sim.simulate(PLUS_ONE, args, block=4)
    first["out"][:] = 99
    second = sim.simulate(PLUS_ONE, args, block=4)
    assert np.array_equal(second["out"], [1, 2, 3, 4])
    assert not np.shares_memory(first["out"], second["out"])
    assert np.array_equal(args[1], np.zeros(4))  # the inputs are never modified


def test_threads_running_one_launch_at_once_each_get_their_own_results() -> None:
    # a kernel long enough for the runs to overlap: each thread's x must come back plus one
    k = kernel([array("x"), array("out")],
               ir.For(var="t", start=const(0), stop=const(200), step=const(1), body=(
                   ir.Store(array="out", index=TX,
                            value=add(ir.Load(array="x", index=TX, type=I32), const(1))),)))
    def launch(start: int) -> bool:
        x = np.arange(start, start + 64, dtype=np.int32)
        return all(np.array_equal(sim.simulate(k, [x, np.zeros(64, np.int32)], block=64)["out"],
                                  x + 1) for _ in range(5))
    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(launch, range(0, 4000, 1000)))


def test_a_failed_launch_leaves_nothing_for_the_next_one() -> None:
    # out[tx] = 5 for tx < 2, then out[x[tx]] = 6: x = 9 fails after the first store
    k = kernel([array("x"), array("out")],
               ir.If(cond=ir.Binary(op=ir.BinOp.LT, a=TX, b=const(2), type=BOOL), then=(
                   ir.Store(array="out", index=TX, value=const(5)),)),
               ir.Store(array="out", index=ir.Load(array="x", index=TX, type=I32),
                        value=const(6)))
    with pytest.raises(OutOfBounds):
        sim.simulate(k, [np.array([0, 1, 9, 3], np.int32), np.full(4, 7, np.int32)], block=4)
    out = sim.simulate(k, [np.array([3, 3, 3, 3], np.int32), np.full(4, 8, np.int32)],
                       block=4)["out"]
    assert np.array_equal(out, [5, 5, 8, 6])


def test_a_remembered_result_follows_its_operands() -> None:
    # v + 7 and t * 4 + tx are evaluated every trip; v changes on every other trip
    v, t = var("v"), var("t")
    k = kernel([array("out")],
               ir.Let(name="v", type=I32, value=mul(TX, const(3))),
               ir.For(var="t", start=const(0), stop=const(4), step=const(1), body=(
                   ir.Store(array="out", index=add(mul(t, const(4)), TX), value=add(v, const(7))),
                   ir.If(cond=ir.Binary(op=ir.BinOp.EQ, a=ir.Binary(op=ir.BinOp.REM, a=t,
                                                                       b=const(2), type=I32),
                                        b=const(1), type=ir.ElemType.BOOL),
                         then=(ir.Assign(name="v", value=mul(v, const(2))),)))))
    out = sim.simulate(k, [np.zeros(16, np.int32)], block=4)["out"].reshape(4, 4)
    tx = np.arange(4)
    assert np.array_equal(out, [tx * 3 + 7, tx * 3 + 7, tx * 6 + 7, tx * 6 + 7])


def test_a_product_that_only_the_sum_holds_takes_the_sum_through_the_closures(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # acc = acc + x*x over 2^16 invocations (the general path: under an always-true if): the
    # product is stored into by the sum, so two large buffers serve every trip (the index and
    # the product, then the next trip's), not three
    made: list[int] = []
    original = Buffers.empty
    def counted(self: Buffers, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
        out = original(self, shape, dtype)
        made.append(self._made)
        return out
    monkeypatch.setattr(Buffers, "empty", counted)
    gid = add(mul(builtin(Builtin.BLOCK_IDX_X), const(256)), TX)
    x, acc = ir.Load(array="x", index=gid, type=F32), var("acc", F32)
    k = kernel([array("x", F32), array("out", F32)],
               ir.Let(name="acc", type=F32, value=const(0.0, F32)),
               ir.For(var="t", start=const(0), stop=const(20), step=const(1), body=(
                   ir.If(cond=ir.Const(value=True, type=BOOL), then=(
                       ir.Assign(name="acc", value=add(acc, mul(x, x))),)),)),
               ir.Store(array="out", index=gid, value=acc))
    x0 = np.full(1 << 16, 1.5, np.float32)
    out = sim.simulate(k, [x0, np.zeros(1 << 16, np.float32)], grid=256, block=256)["out"]
    assert np.all(out == np.float32(20 * 2.25)) and max(made) == 2
