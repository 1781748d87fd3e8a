"""The OpenCL printer on a real OpenCL implementation (PoCL on the CPU): every example and
every arithmetic probe kernel runs bit-identically to the simulator."""

from __future__ import annotations

import numpy as np
import pytest
from arith_cases import (
    FLOATS,
    INTS,
    TRANSCENDENTAL,
    N,
    binary_kernel,
    cast_kernel,
    edge_values,
    math_kernel,
    mismatches,
)
from conftest import GEMM_EXAMPLES, example

from backends.opencl import opencl_available, run
from sarek import ir
from sarek.dsl import numpy_dtype
from sarek.ir import ElemType
from sim import simulate

pytestmark = pytest.mark.skipif(opencl_available() is not None,
                                reason=f"no OpenCL device: {opencl_available()}")


@pytest.mark.parametrize("size", [(37, 29, 23), (1, 1, 1), (9, 5, 0)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", GEMM_EXAMPLES)
def test_every_example_runs_bit_identically(name: str, size: tuple[int, int, int]) -> None:
    launch = example(name).make(*size, seed=5)
    want = launch.simulate()
    got = run(launch.kernel, dict(launch.args), launch.grid, launch.block)
    for array in want:
        assert np.array_equal(got[array].view(np.uint8), want[array].view(np.uint8)), array


def probe(kernel: ir.Kernel, args: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    with np.errstate(all="ignore"):
        want = simulate(kernel, args, grid=1, block=N)
    got = run(kernel, args, (1,), (N,))
    return {name: np.array(mismatches(got[name], want[name])) for name in want}


@pytest.mark.parametrize("t", INTS + FLOATS, ids=str)
def test_every_operation_is_bit_identical(t: ElemType) -> None:
    rng = np.random.default_rng(11)
    kernel, names = binary_kernel(t)
    a, b = edge_values(t, rng), np.roll(edge_values(t, rng), 5)
    if t.is_int:
        b = np.where(b == 0, np.ones_like(b), b)  # x / 0 is undefined in the IR
    arith = len(names) - 6
    bad = probe(kernel, {"a": a, "b": b, "out": np.zeros(arith * N, a.dtype),
                         "flags": np.zeros(6 * N, np.bool_)})
    assert int(bad["out"]) == 0 and int(bad["flags"]) == 0


@pytest.mark.parametrize("src", [*INTS, *FLOATS, ElemType.F16, ElemType.BF16], ids=str)
def test_every_conversion_is_bit_identical(src: ElemType) -> None:
    rng = np.random.default_rng(12)
    kernel = cast_kernel(src)
    with np.errstate(over="ignore"):  # edge values beyond f16's range become infinities
        values = (edge_values(src, rng) if src not in (ElemType.F16, ElemType.BF16)
                  else edge_values(ElemType.F32, rng).astype(numpy_dtype(src)))
    args = {"a": values, **{p.name: np.zeros(N, numpy_dtype(p.elem))
                            for p in kernel.params[1:]}}
    bad = probe(kernel, args)
    assert {k: int(v) for k, v in bad.items() if k != "a" and v} == {}


@pytest.mark.parametrize("t", FLOATS, ids=str)
def test_exact_math_functions_are_bit_identical(t: ElemType) -> None:
    rng = np.random.default_rng(13)
    kernel = math_kernel(t)
    vals = [edge_values(t, rng) for _ in range(3)]
    args = {"a": vals[0], "b": np.roll(vals[1], 3), "c": np.roll(vals[2], 7),
            "out": np.zeros(len(ir.MathFn) * N, vals[0].dtype)}
    with np.errstate(all="ignore"):
        want = simulate(kernel, args, grid=1, block=N)["out"]
    got = run(kernel, args, (1,), (N,))["out"]
    for k, fn in enumerate(ir.MathFn):
        if fn not in TRANSCENDENTAL:
            assert mismatches(got[k * N:(k + 1) * N], want[k * N:(k + 1) * N]) == 0, fn
