"""Every bundled example, simulated, equals its independent NumPy reference bit for bit, at
ragged, tiny and empty sizes; and every example runs as a script."""

from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES, GEMM_EXAMPLES, example

from sarek.demo_rows import compare

SIZES = [(37, 29, 23), (1, 1, 1), (16, 16, 16), (20, 9, 0)]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", GEMM_EXAMPLES)
def test_simulation_equals_the_numpy_reference(name: str, size: tuple[int, int, int]) -> None:
    module = example(name)
    launch = module.make(*size, seed=7)
    out = launch.simulate()
    for array, want in module.reference(launch).items():
        same, how = compare(out[array], want)
        assert same, f"{name} {size} {array}: {how}"


def test_int32_example_wraps_on_full_range_inputs() -> None:
    module = example("gemm_i32")
    launch = module.make(12, 10, 9, seed=3)
    a = launch.args["a"].astype(np.int64).reshape(12, 9)
    b = launch.args["b"].astype(np.int64).reshape(9, 10)
    exact = a @ b  # int64 may itself wrap, so reduce each product mod 2^32 first
    wrapped = ((a[:, :, None] * b[None, :, :]) % 2**32).sum(axis=1) % 2**32
    assert np.abs(exact).max() > 2**31  # the inputs really overflow int32
    got = launch.simulate()["c"].astype(np.int64) % 2**32
    assert np.array_equal(got, wrapped.ravel())


def test_seed_ldmatrix_example_reproduces_the_seed_table() -> None:
    module = example("ldmatrix_interleaved")
    assert np.array_equal(module.make().simulate()["out"].reshape(32, 12), module.expected())


@pytest.mark.parametrize("script", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_every_example_runs_as_a_script(script: str, capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(Path(EXAMPLES) / script), run_name="__main__")
    printed = capsys.readouterr().out
    assert printed.strip().endswith("True"), printed
