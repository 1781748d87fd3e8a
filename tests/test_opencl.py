"""The OpenCL printer on a real OpenCL implementation (PoCL on the CPU): every example and
every arithmetic probe kernel runs bit-identically to the simulator."""

from __future__ import annotations

import numpy as np
import pytest
from arith_cases import (
    CAST_SOURCES,
    FLOATS,
    INTS,
    TRANSCENDENTAL,
    N,
    Probe,
    binary_probe,
    cast_probe,
    compare,
    math_probe,
)
from conftest import GEMM_EXAMPLES, example

from backends.opencl import opencl_available, run
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


def mismatched(probe: Probe) -> dict[str, int]:
    """The probe's operations whose outputs differ on the OpenCL device, with how many."""
    with np.errstate(all="ignore"):
        want = simulate(probe.kernel, probe.args, grid=1, block=N)
    got = run(probe.kernel, probe.args, (1,), (N,))
    return {what: bad for what, bad in compare(probe, got, want) if bad}


@pytest.mark.parametrize("t", INTS + FLOATS, ids=str)
def test_every_operation_is_bit_identical(t: ElemType) -> None:
    assert mismatched(binary_probe(t, np.random.default_rng(11))) == {}


@pytest.mark.parametrize("src", CAST_SOURCES, ids=str)
def test_every_conversion_is_bit_identical(src: ElemType) -> None:
    assert mismatched(cast_probe(src, np.random.default_rng(12))) == {}


@pytest.mark.parametrize("t", FLOATS, ids=str)
def test_exact_math_functions_are_bit_identical(t: ElemType) -> None:
    bad = mismatched(math_probe(t, np.random.default_rng(13)))
    assert {what: n for what, n in bad.items()
            if what not in {fn.value for fn in TRANSCENDENTAL}} == {}
