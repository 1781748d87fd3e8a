"""The rewritten kernel writes the covered outputs and nothing else.

C is pre-filled with a bit pattern, twice with two different patterns; an element counts as
written when it differs from the pattern in either run. No element outside
``matrix_mapping.covered`` may be written (it keeps its pattern bit for bit), and every covered
one must be, unless the description (the oracle, ``tests/oracle.py``) gives it its old value in
both runs (``beta * c`` with beta = 1 and K = 0, say). The whole of C must equal, bit for bit,
what the original kernel leaves in the same pre-filled C. Float operands are small integers
and the f32 patterns integers, so every lowering promises the original's bits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest
from conftest import GEMM_EXAMPLES, example
from gemm_gen import GemmSpec, build, geometry, launch
from oracle import evaluate
from test_matrix_rewrite import (
    APPLICABLE,
    bits,
    original,
    rewritten,
    small_integers,
    with_operands,
)

from sarek.launch import Launch
from sarek.matrix_mapping import Region, covered, region
from sarek.matrix_pattern import recognize
from sarek.matrix_scheme import Lowering, select

# f32: 1.5e16 (small integers vanish below its last place) and -12829635, an integer in
# [2^23, 2^24): as an initial value read from C it keeps every partial sum exact, which
# Bf16x3's bit-identity needs (it sums each sub-step apart before adding it to the running sum)
PATTERNS = {np.dtype(np.float32): (0x5A5AA5A5, 0xCB43C3C3),
            np.dtype(np.float16): (0x5A5A, 0xC3C3),
            np.dtype(np.int32): (0x5A5AA5A5, 0xC3C3C3C3)}


def prepared(name: str, m: int, n: int, k: int) -> Launch:
    """The example's launch; float operands replaced by small integers."""
    run: Launch = example(name).make(m, n, k, seed=21)
    if recognize(run.kernel).operand_elt.is_float:
        return with_operands(run, small_integers(22))
    return run


def generated(spec: GemmSpec) -> Launch:
    grid, block = geometry(spec)
    return Launch(build(spec).ir, launch(spec, seed=23), grid, block)


def check(run: Launch, lowering: Lowering | None = None, subgroup: int = 32,
          frag: int = 16) -> Region:
    """Asserts the module docstring's promise for one launch; returns its region."""
    gemm = recognize(run.kernel)
    lowering = lowering or select(gemm)
    reg = region(gemm, run.grid, run.block, dict(run.args))
    c = run.args[gemm.c.array]
    written, silent = np.zeros(c.size, bool), np.ones(c.size, bool)
    for pattern in PATTERNS[c.dtype]:
        filled = np.full(c.size, pattern, f"u{c.dtype.itemsize}").view(c.dtype)
        run = replace(run, args={**run.args, gemm.c.array: filled})
        got = rewritten(run, lowering, subgroup, frag)
        assert np.array_equal(bits(got), bits(original(run)))
        written |= bits(got) != bits(filled)
        silent &= bits(evaluate(gemm, reg, dict(run.args))) == bits(filled)
    inside = np.zeros(c.size, bool)
    inside[covered(gemm, reg, dict(run.args))] = True
    assert not written[~inside].any()
    assert (written | silent)[inside].all()
    return reg


RAGGED = [(name, low) for name in GEMM_EXAMPLES
          for low in APPLICABLE[recognize(example(name).make(4, 4, 4).kernel).operand_elt]]


@pytest.mark.parametrize(("subgroup", "frag"), [(32, 16), (64, 8)])
@pytest.mark.parametrize(("name", "lowering"), RAGGED,
                         ids=[f"{n}-{low.value}" for n, low in RAGGED])
def test_ragged_70x33x17_writes_only_the_covered_outputs(
        name: str, lowering: Lowering, subgroup: int, frag: int) -> None:
    check(prepared(name, 70, 33, 17), lowering, subgroup, frag)


@pytest.mark.parametrize("name", ["gemm_f32", "gemm_i32", "gemm_f16", "gemm_epilogue"])
def test_a_reduction_of_one_writes_only_the_covered_outputs(name: str) -> None:
    assert check(prepared(name, 70, 33, 1), frag=8).d == 1


@pytest.mark.parametrize("name", ["gemm_epilogue", "gemm_i32", "gemm_batched"])
def test_a_reduction_of_zero_writes_the_epilogue_of_the_initial_value(name: str) -> None:
    assert check(prepared(name, 70, 33, 0)).d == 0


def test_a_reduction_of_zero_with_an_initial_value_read_from_memory() -> None:
    spec = GemmSpec(init="bias", epilogue="alpha_beta", m=70, n=33, k=0, block=(16, 16, 1))
    check(generated(spec), subgroup=64)


def test_a_partial_row_major_1d_launch_writes_only_its_prefix() -> None:
    run = prepared("gemm_f32_1d", 70, 33, 17)
    # 11 blocks of 128 where 19 are needed: 1408 outputs, 42 full rows and 22 of row 42.
    reg = check(replace(run, grid=(11, 1, 1)))
    assert (reg.me, reg.ne, reg.t) == (43, 33, 1408)


def test_a_partial_column_major_1d_launch_writes_only_its_prefix() -> None:
    spec = GemmSpec(mapping="1d-col", m=70, n=33, k=17, block=(128, 1, 1),
                    grid_delta=(-8, 0, 0))
    reg = check(generated(spec), frag=8)
    assert (reg.me, reg.ne, reg.t) == (70, 21, 1408)


def test_a_batched_launch_writes_every_batch() -> None:
    assert check(prepared("gemm_batched", 70, 33, 17), frag=8).ze == 3


def test_a_batched_launch_of_fewer_layers_leaves_the_last_batch_alone() -> None:
    run = prepared("gemm_batched", 70, 33, 17)
    assert check(replace(run, grid=(*run.grid[:2], 2)), subgroup=64).ze == 2


def test_a_batched_kernel_with_ragged_layouts_and_offsets() -> None:
    spec = GemmSpec(batch=True, a_major="col", b_major="col", c_major="col", pads=(1, 2, 3),
                    offsets=(3, 1, 2), init="c_old", epilogue="bias", m=70, n=33, k=17,
                    batches=3, block=(16, 16, 1), grid_delta=(0, 0, -1))
    assert check(generated(spec), frag=8).ze == 2


@pytest.mark.parametrize("change", [
    lambda run: replace(run, grid=(0, *run.grid[1:])),
    lambda run: replace(run, grid=(*run.grid[:2], 0)),
    lambda run: replace(run, args={**run.args, "m": 0}),
], ids=["grid-x-0", "grid-z-0", "m-0"])
def test_a_zero_extent_writes_nothing(change: Callable[[Launch], Launch]) -> None:
    reg = check(change(prepared("gemm_batched", 70, 33, 17)))
    assert reg.outputs == 0
