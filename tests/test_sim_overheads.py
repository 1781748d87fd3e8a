"""What the simulator skips to save time on small launches never changes what it gives: a kernel
is validated once per identity yet refused on every call while invalid, and a binary
operation whose operands are the objects of its last evaluation gives its last result, which
follows its operands as soon as they change."""

from __future__ import annotations

import numpy as np
import pytest
from sim_helpers import I32, add, array, builtin, const, kernel, mul, var

import sim
from sarek import ir
from sarek.errors import IRError
from sarek.ir import Builtin

TX = builtin(Builtin.THREAD_IDX_X)


def test_an_invalid_kernel_is_refused_on_every_call() -> None:
    k = kernel([array("out")], ir.Store(array="out", index=const(0), value=var("nowhere")))
    for _ in range(2):
        with pytest.raises(IRError):
            sim.simulate(k, [np.zeros(1, np.int32)])


def test_a_valid_kernel_runs_again_with_new_arguments() -> None:
    k = kernel([array("x"), array("out")],
               ir.Store(array="out", index=TX, value=add(ir.Load(array="x", index=TX, type=I32),
                                                          const(1))))
    for start in (0, 10):
        x = np.arange(start, start + 4, dtype=np.int32)
        out = sim.simulate(k, [x, np.zeros(4, np.int32)], block=4)["out"]
        assert np.array_equal(out, x + 1)


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
