"""The region a launch covers: guards and launch geometry together, zero extents, partial 1-D
launches, and the reasons bad launches or arguments are refused."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import example
from test_matrix_pattern import one_d_column_major

from sarek.matrix_mapping import Region, RegionError, covered, region
from sarek.matrix_pattern import recognize

NAIVE = recognize(example("gemm_f32").make(8, 8, 8).kernel)
ONE_D = recognize(example("gemm_f32_1d").make(8, 8, 8).kernel)
BATCHED = recognize(example("gemm_batched").make(8, 8, 8).kernel)
TILED = recognize(example("gemm_tiled").make(8, 8, 8).kernel)


def scalars(m: int, n: int, k: int, **more: int) -> dict[str, int]:
    return {"m": m, "n": n, "k": k, **more}


def test_guard_limits_a_launch_that_overshoots() -> None:
    assert region(NAIVE, (3, 5, 1), (16, 16, 1), scalars(70, 45, 33)) == Region(70, 45, 1, 33,
                                                                                3150)


def test_launch_limits_a_guard_it_does_not_reach() -> None:
    assert region(NAIVE, (2, 3, 1), (16, 16, 1), scalars(70, 45, 9)) == Region(48, 32, 1, 9,
                                                                               1536)


def test_zero_sizes_give_zero_extents() -> None:
    assert region(NAIVE, (1, 1, 1), (16, 16, 1), scalars(0, 5, 0)) == Region(0, 5, 1, 0, 0)


def test_empty_launch_covers_nothing() -> None:
    assert region(NAIVE, (0, 1, 1), (16, 16, 1), scalars(4, 4, 4)).outputs == 0


def test_negative_trip_count_is_zero_depth() -> None:
    assert region(NAIVE, (1, 1, 1), (8, 8, 1), scalars(4, 4, -3)).d == 0


def test_one_d_launch_covering_everything_has_t_equal_to_all_outputs() -> None:
    assert region(ONE_D, (2, 1, 1), (128, 1, 1), scalars(10, 7, 3)) == Region(10, 7, 1, 3, 70)


def test_partial_one_d_launch_stops_inside_a_row() -> None:
    # 23 invocations of a 10 x 7 output: rows 0-2 complete, row 3 up to column 1.
    assert region(ONE_D, (1, 1, 1), (23, 1, 1), scalars(10, 7, 3)) == Region(4, 7, 1, 3, 23)


def test_partial_column_major_launch_counts_in_column_order() -> None:
    g = recognize(one_d_column_major)
    # 11 invocations of a 5 x 4 output in column order: columns 0 and 1, then rows 0 of col 2.
    assert region(g, (1, 1, 1), (11, 1, 1), scalars(5, 4, 2)) == Region(5, 3, 1, 2, 11)


def test_covered_addresses_of_a_partial_launch() -> None:
    reg = region(ONE_D, (1, 1, 1), (9, 1, 1), scalars(3, 4, 1))
    assert sorted(covered(ONE_D, reg, scalars(3, 4, 1)).tolist()) == list(range(9))


def test_batches_come_from_the_grid_and_the_guard() -> None:
    reg = region(BATCHED, (1, 1, 5), (8, 8, 1), scalars(4, 4, 4, batches=3))
    assert (reg.ze, reg.t) == (3, 48)


def test_arguments_by_position_equal_arguments_by_name() -> None:
    launch = example("gemm_f32").make(20, 12, 7)
    assert region(NAIVE, launch.grid, launch.block, launch.arg_list()) == region(
        NAIVE, launch.grid, launch.block, dict(launch.args))


def test_region_values_are_the_rewrite_parameters_in_order() -> None:
    assert Region(1, 2, 3, 4, 5).args == (1, 2, 3, 4, 5)


def test_missing_scalar_is_refused() -> None:
    with pytest.raises(RegionError, match="the scalar argument 'k' is missing"):
        region(NAIVE, (1, 1, 1), (8, 8, 1), {"m": 4, "n": 4})


def test_unknown_argument_is_refused() -> None:
    with pytest.raises(RegionError, match="no parameter 'q'"):
        region(NAIVE, (1, 1, 1), (8, 8, 1), scalars(4, 4, 4, q=1))


def test_wrong_number_of_positional_arguments_is_refused() -> None:
    with pytest.raises(RegionError, match="takes 6 arguments"):
        region(NAIVE, (1, 1, 1), (8, 8, 1), [4, 4, 4])


def test_non_integer_size_is_refused() -> None:
    with pytest.raises(RegionError, match="must be an integer"):
        region(NAIVE, (1, 1, 1), (8, 8, 1), scalars(4, 4, 2.5))  # type: ignore[arg-type]


def test_negative_launch_dimension_is_refused() -> None:
    with pytest.raises(RegionError, match="negative dimension"):
        region(NAIVE, (1, -1, 1), (8, 8, 1), scalars(4, 4, 4))


def test_staged_kernel_launched_with_other_blocks_is_refused() -> None:
    with pytest.raises(RegionError, match=r"stages its operands for blocks of \(16, 16, 1\)"):
        region(TILED, (2, 2, 1), (8, 8, 1), scalars(16, 16, 16))


def test_unused_launch_axis_is_refused() -> None:
    with pytest.raises(RegionError, match="does not use the z coordinate"):
        region(NAIVE, (1, 1, 2), (8, 8, 1), scalars(4, 4, 4))


def test_partial_one_d_launch_over_several_batches_is_refused() -> None:
    from gemm_gen import build_source

    k = build_source(
        "def g(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):\n"
        "    z = block_idx.z\n"
        "    tid = block_idx.x * block_dim.x + thread_idx.x\n"
        "    if tid < m * n and z < 2:\n"
        "        row = tid // n\n"
        "        col = tid % n\n"
        "        acc = 0\n"
        "        for p in range(k):\n"
        "            acc += a[z * m * k + row * k + p] * b[z * k * n + p * n + col]\n"
        "        c[z * m * n + row * n + col] = acc\n", "g")
    with pytest.raises(RegionError, match="only part of each batch"):
        region(recognize(k), (1, 1, 2), (5, 1, 1), scalars(3, 3, 1))


def test_overlapping_store_addresses_are_refused() -> None:
    from gemm_gen import build_source

    k = build_source(
        "def g(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32,"
        " ldc: i32):\n"
        "    row = block_idx.y * block_dim.y + thread_idx.y\n"
        "    col = block_idx.x * block_dim.x + thread_idx.x\n"
        "    if row < m and col < n:\n"
        "        acc = 0\n"
        "        for p in range(k):\n"
        "            acc += a[row * k + p] * b[p * n + col]\n"
        "        c[row * ldc + col] = acc\n", "g")
    with pytest.raises(RegionError, match="two covered outputs to one element"):
        region(recognize(k), (1, 1, 1), (8, 8, 1), scalars(4, 4, 1, ldc=2))


def test_region_of_an_example_launch_covers_its_output() -> None:
    launch = example("gemm_f32").make(33, 17, 5)
    reg = region(NAIVE, launch.grid, launch.block, dict(launch.args))
    addresses = covered(NAIVE, reg, dict(launch.args))
    assert np.array_equal(np.sort(addresses), np.arange(33 * 17))
