"""Launching the simulator: arguments, geometry, copies and what comes back."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from sim_helpers import F32, I32, array, const, kernel, load, lt, mul, naive_gemm, scalar, tid, var

import sim
from sarek import ir
from sarek.errors import IRError, LaunchError
from sarek.ir import ElemType

i = var("i")


def copy_kernel(t: ElemType = F32) -> ir.Kernel:
    """``out[i] = x[i] * s`` for ``i < n``."""
    return kernel([array("x", t, readonly=True), array("out", t), scalar("s", t), scalar("n")],
                  ir.Let(name="i", type=I32, value=tid()),
                  ir.If(cond=lt(i, var("n")), then=(ir.Store(
                      array="out", index=i, value=mul(load("x", i, t), var("s", t))),)))


def test_arguments_by_list_and_by_dict_give_the_same_result() -> None:
    x = np.arange(10, dtype=np.float32)
    out = np.zeros(10, np.float32)
    by_list = sim.simulate(copy_kernel(), [x, out, 2.0, 10], grid=1, block=16)
    by_dict = sim.simulate(copy_kernel(), {"n": 10, "s": 2.0, "out": out, "x": x},
                           grid=1, block=16)
    assert list(by_list) == ["x", "out"]
    assert np.array_equal(by_list["out"], 2 * x)
    assert np.array_equal(by_dict["out"], by_list["out"])


def test_inputs_are_never_modified_and_every_array_comes_back() -> None:
    x = np.arange(10, dtype=np.float32)
    out = np.full(10, 7, np.float32)
    result = sim.simulate(copy_kernel(), [x, out, 3.0, 4], grid=1, block=16)
    assert np.array_equal(out, np.full(10, 7, np.float32))
    assert np.array_equal(x, np.arange(10, dtype=np.float32))
    assert np.array_equal(result["x"], x) and result["x"] is not x
    assert list(result["out"]) == [0, 3, 6, 9] + [7] * 6


def test_multidimensional_arrays_are_raveled() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = sim.simulate(copy_kernel(), [x.T, np.zeros((4, 3), np.float32), 1.0, 12], grid=1,
                       block=16)["out"]
    assert out.shape == (12,)
    assert np.array_equal(out, x.T.ravel())


def test_a_zero_grid_dimension_is_an_empty_launch() -> None:
    out = np.full(4, 5, np.float32)
    result = sim.simulate(copy_kernel(), [np.ones(4, np.float32), out, 1.0, 4],
                          grid=(0, 3), block=4)
    assert list(result["out"]) == [5] * 4


def test_float_scalars_round_once_to_the_parameter_type() -> None:
    x = np.ones(2, np.float32)
    out = sim.simulate(copy_kernel(), [x, np.zeros(2, np.float32), 0.1, 2], grid=1,
                       block=2)["out"]
    assert out[0] == np.float32(0.1)
    big = sim.simulate(copy_kernel(), [x, np.zeros(2, np.float32), 2**24 + 1, 2], grid=1,
                       block=2)["out"]
    assert big[0] == 2**24


def test_bf16_arrays_and_scalars() -> None:
    bf16 = ml_dtypes.bfloat16
    k = kernel([array("out", ElemType.BF16), scalar("s", ElemType.BF16)],
               ir.Store(array="out", index=const(0), value=var("s", ElemType.BF16)))
    out = sim.simulate(k, [np.zeros(1, bf16), 1 + 2**-8 + 2**-30], grid=1, block=1)["out"]
    assert out.dtype == bf16 and float(out[0]) == 1 + 2**-7


@pytest.mark.parametrize("args,message", [
    ([np.zeros(2, np.float32)], "takes 4 arguments (x, out, s, n), got 1"),
    ({"x": 0, "out": 0, "s": 1.0, "n": 2, "m": 3}, "unknown parameter(s) 'm'"),
    ({"x": np.zeros(2, np.float32), "s": 1.0, "n": 2}, "missing argument(s) for 'out'"),
    ([np.zeros(2, np.float64), np.zeros(2, np.float32), 1.0, 2],
     "parameter 'x' expects dtype float32 (f32), got an array of float64"),
    ([[1.0, 2.0], np.zeros(2, np.float32), 1.0, 2],
     "parameter 'x' expects a NumPy array of float32 (f32), got list"),
    ([np.zeros(2, np.float32), np.zeros(2, np.float32), 1.0, 2.0],
     "parameter 'n' is i32 and cannot take the float 2.0"),
    ([np.zeros(2, np.float32), np.zeros(2, np.float32), 1.0, 2**31],
     "parameter 'n' is i32: 2147483648 is outside [-2147483648, 2147483647]"),
    ([np.zeros(2, np.float32), np.zeros(2, np.float32), 1.0, True],
     "parameter 'n' expects a i32 number, got the bool True"),
    ([np.zeros(2, np.float32), np.zeros(2, np.float32), "1", 2],
     "parameter 's' expects a f32 scalar, got str"),
    ("abc", "arguments must be a list in parameter order or a dict by name, got str"),
])
def test_bad_arguments_are_launch_errors_naming_the_parameter(args: object,
                                                              message: str) -> None:
    with pytest.raises(LaunchError) as info:
        sim.simulate(copy_kernel(), args, grid=1, block=2)  # type: ignore[arg-type]
    assert message in info.value.reason


@pytest.mark.parametrize("grid,block,message", [
    (1, (32, 33), "block (32, 33, 1) has 1056 invocations, more than 1024"),
    (1, (4, 0), "block (4, 0, 1) has a zero dimension"),
    ((1, 2, 3, 4), 1, "grid must be 1 to 3 non-negative integers"),
    (-1, 1, "grid must be 1 to 3 non-negative integers"),
    (1, 2.0, "block must be 1 to 3 non-negative integers"),
])
def test_bad_geometry_is_a_launch_error(grid: object, block: object, message: str) -> None:
    args = [np.zeros(2, np.float32), np.zeros(2, np.float32), 1.0, 2]
    with pytest.raises(LaunchError, match=message.replace("(", r"\(").replace(")", r"\)")):
        sim.simulate(copy_kernel(), args, grid=grid, block=block)


def test_an_ill_formed_kernel_is_an_ir_error() -> None:
    k = kernel([array("out")], ir.Store(array="out", index=const(0), value=var("nowhere")))
    with pytest.raises(IRError, match="undefined name 'nowhere'"):
        sim.simulate(k, [np.zeros(1, np.int32)], grid=1, block=1)


def test_a_gemm_matches_numpy_for_a_launch_larger_than_the_output() -> None:
    m, n, k = 33, 17, 9
    rng = np.random.default_rng(3)
    a = rng.integers(-50, 50, m * k).astype(np.int32)
    b = rng.integers(-50, 50, k * n).astype(np.int32)
    out = sim.simulate(naive_gemm(I32), [a, b, np.zeros(m * n, np.int32), m, n, k],
                       grid=(2, 3), block=(16, 16))["c"]
    assert np.array_equal(out, (a.reshape(m, k) @ b.reshape(k, n)).ravel())
