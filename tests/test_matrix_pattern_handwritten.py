"""GEMM kernels as people write them by hand (the shapes of the CUDA programming guide's
shared-memory matmul, cuda-samples' matrixMul, numba's ``fast_matmul`` and the SGEMM worklog's
kernels, each written here afresh in the DSL) are recognized and rewritten like the naive form,
their staging and barriers replaced by the rewrite's; the forms that stay refused say what
stops them and what would make them recognizable.

Each recognized kernel runs as written and rewritten (``rewrite_launch`` with its default
lowering) on ragged sizes, C pre-filled with a canary pattern and longer than the output. Outside
the covered outputs the rewrite must leave every canary bit, as the original does; inside, int32
and f16 results must equal the original's bit for bit, and f32 results (the Bf16x3 lowering) must
be within

    |rewritten - original| <= (5u + 1.02 gamma_6K+1(u) + gamma_K+1(u)) * (|c0| + sum_p |a_p b_p|)

of the original, ``u = 2^-24``, ``gamma_n(u) = n u / (1 - n u)``, ``c0`` the initial value:
Bf16x3's bound against the exact sum (``test_matrix_rewrite_accuracy``) plus the f32 kernel's own
recursive-summation bound, each with the initial value as one more term.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import sarek
from sarek import (
    Global,
    S,
    barrier,
    block_dim,
    block_idx,
    f16,
    f32,
    grid_dim,
    i32,
    thread_idx,
)
from sarek.launch import Launch
from sarek.matrix_mapping import RegionError, covered, region
from sarek.matrix_pattern import Gemm, NotAGemm, recognize
from sarek.matrix_rewrite import rewrite_launch

T = 8
TILE = S[(8, 8) : (8, 1)]
PADDED = S[(8, 8) : (9, 1)]  # rows one element apart (against bank conflicts)
TILE16 = S[(16, 16) : (16, 1)]
SIZE = (37, 29, 23)  # ragged rows, columns and depth
EXTRA = 11  # canaries past the end of C
PATTERN = {np.dtype(np.float32): 0x5A5AA5A5, np.dtype(np.float16): 0x5A5A,
           np.dtype(np.int32): 0x5A5AA5A5}
U = 2.0**-24


def bits(x: np.ndarray) -> np.ndarray:
    return x.view(f"u{x.dtype.itemsize}")


def gamma(n: int) -> float:
    return n * U / (1 - n * U)


def operands(elem: type, m: int, n: int, k: int, seed: int = 5,
             old_c: bool = False) -> dict[str, Any]:
    """Row-major A (m x k), B (k x n) and C (m x n, then ``EXTRA`` canaries): random values (any
    int32, normal floats); C holds the canary pattern, or random old values where the kernel
    adds into it (``old_c``)."""
    rng = np.random.default_rng(seed)

    def fill(size: int) -> np.ndarray:
        if elem is np.int32:
            return rng.integers(-2**31, 2**31, size, dtype=np.int64).astype(np.int32)
        return rng.standard_normal(size).astype(elem)

    dtype = np.dtype(elem)
    c = np.full(m * n + EXTRA, PATTERN[dtype], f"u{dtype.itemsize}").view(dtype)
    if old_c:
        c[:m * n] = fill(m * n)
    return {"a": fill(m * k), "b": fill(k * n), "c": c, "m": m, "n": n, "k": k}


def grid_2d(m: int, n: int, tile: int = T) -> tuple[int, int, int]:
    return -(-n // tile), -(-m // tile), 1


def rewritten_like_the_original(kernel: sarek.KernelFunction, args: dict[str, Any],
                                grid: tuple[int, int, int], block: tuple[int, int, int]) -> Gemm:
    """Asserts the module docstring's promise for one launch; returns the recognized nest."""
    launch = Launch(kernel.ir, args, grid, block)
    gemm = recognize(kernel)
    before = args["c"]
    want = launch.simulate()["c"]
    done = rewrite_launch(launch)
    got = done.launch.simulate()["c"]
    inside = np.zeros(before.size, bool)
    inside[covered(gemm, done.region, args)] = True
    assert inside.any()
    assert np.array_equal(bits(want)[~inside], bits(before)[~inside])
    assert np.array_equal(bits(got)[~inside], bits(before)[~inside])
    if before.dtype != np.float32:
        assert np.array_equal(bits(got), bits(want))
        return gemm
    m, n, k, d = args["m"], args["n"], args["k"], done.region.d
    a = np.abs(args["a"].astype(np.float64).reshape(m, k)[:, :d])
    b = np.abs(args["b"].astype(np.float64).reshape(k, n)[:d])
    scale = a @ b
    if gemm.reads_c:
        scale = scale + np.abs(before[:m * n].astype(np.float64).reshape(m, n))
    bound = (5 * U + 1.02 * gamma(6 * d + 1) + gamma(d + 1)) * scale.ravel()
    error = np.abs(got.astype(np.float64) - want.astype(np.float64))[:m * n]
    assert np.all(error[inside[:m * n]] <= bound[inside[:m * n]])
    return gemm


def refusal(kernel: sarek.KernelFunction) -> str:
    with pytest.raises(NotAGemm) as info:
        recognize(kernel)
    return info.value.reason


# --------------------------------------------------------------------------- 2-D tiles, count


@sarek.kernel
def guide_tiles(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    a_tile = sarek.shared(i32, TILE)
    b_tile = sarek.shared(i32, TILE)
    ty = thread_idx.y
    tx = thread_idx.x
    row = block_idx.y * T + ty
    col = block_idx.x * T + tx
    total = 0
    for tile in range((k + T - 1) // T):
        if row < m and tile * T + tx < k:
            a_tile[ty, tx] = a[row * k + tile * T + tx]
        else:
            a_tile[ty, tx] = 0
        if tile * T + ty < k and col < n:
            b_tile[ty, tx] = b[(tile * T + ty) * n + col]
        else:
            b_tile[ty, tx] = 0
        barrier()
        for e in range(T):
            total += a_tile[ty, e] * b_tile[e, tx]
        barrier()
    if row < m and col < n:
        c[row * n + col] = total


def test_two_d_tiles_counted_by_a_ceiling_division_with_if_else_padding() -> None:
    m, n, k = SIZE
    gemm = rewritten_like_the_original(guide_tiles, operands(np.int32, m, n, k),
                                       grid_2d(m, n), (T, T, 1))
    assert gemm.staging is not None and gemm.staging.block == (T, T, 1)
    assert sarek.matrix_pattern.format_expr(gemm.k_stop) == "k"


# --------------------------------------------------------------------------- 1-D tiles, floor


@sarek.kernel
def whole_tiles(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32):
    a_tile = sarek.shared(f32, T * T)
    b_tile = sarek.shared(f32, T * T)
    row = block_idx.y * T + thread_idx.y
    col = block_idx.x * T + thread_idx.x
    total = f32(0.0)
    for tile in range(k // T):
        a_tile[thread_idx.y * T + thread_idx.x] = a[row * k + tile * T + thread_idx.x]
        b_tile[thread_idx.y * T + thread_idx.x] = b[(tile * T + thread_idx.y) * n + col]
        barrier()
        for e in range(T):
            total += a_tile[thread_idx.y * T + e] * b_tile[e * T + thread_idx.x]
        barrier()
    c[row * n + col] = total


def test_one_d_tiles_counted_by_a_floor_division_sum_whole_tiles_only() -> None:
    m, n, k = 32, 24, 37  # whole tiles of output, as the unpadded kernel needs; k is ragged
    gemm = rewritten_like_the_original(whole_tiles, operands(np.float32, m, n, k),
                                       grid_2d(m, n), (T, T, 1))
    assert sarek.matrix_pattern.format_expr(gemm.k_stop) == "k // 8 * 8"
    assert region(gemm, grid_2d(m, n), (T, T, 1), {"m": m, "n": n, "k": k}).d == 32


# --------------------------------------------------------------------------- stride loop, f16


@sarek.kernel
def half_tiles(a: Global[f16], b: Global[f16], c: Global[f16], m: i32, n: i32, k: i32):
    a_tile = sarek.shared(f16, TILE)
    b_tile = sarek.shared(f16, TILE)
    row = block_idx.y * T + thread_idx.y
    col = block_idx.x * T + thread_idx.x
    total = f32(0.0)
    for t in range(0, k, T):
        if row < m and t + thread_idx.x < k:
            a_tile[thread_idx.y, thread_idx.x] = a[row * k + t + thread_idx.x]
        else:
            a_tile[thread_idx.y, thread_idx.x] = 0.0
        if t + thread_idx.y < k and col < n:
            b_tile[thread_idx.y, thread_idx.x] = b[(t + thread_idx.y) * n + col]
        else:
            b_tile[thread_idx.y, thread_idx.x] = 0.0
        barrier()
        for e in range(T):
            total += a_tile[thread_idx.y, e] * b_tile[e, thread_idx.x]
        barrier()
    if row < m and col < n:
        c[row * n + col] = total


def test_f16_tiles_stepped_by_the_tile_are_bit_identical() -> None:
    m, n, k = SIZE
    gemm = rewritten_like_the_original(half_tiles, operands(np.float16, m, n, k),
                                       grid_2d(m, n), (T, T, 1))
    assert gemm.operand_elt == sarek.ir.ElemType.F16


# --------------------------------------------------------------------------- barrier placement


@sarek.kernel
def barrier_first(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    a_tile = sarek.shared(i32, T * T)
    b_tile = sarek.shared(i32, T * T)
    row = block_idx.y * T + thread_idx.y
    col = block_idx.x * T + thread_idx.x
    total = 0
    for t in range(0, k, T):
        barrier()  # the previous step's reads are done
        a_tile[thread_idx.y * T + thread_idx.x] = (
            a[row * k + t + thread_idx.x] if row < m and t + thread_idx.x < k else 0)
        b_tile[thread_idx.y * T + thread_idx.x] = (
            b[(t + thread_idx.y) * n + col] if t + thread_idx.y < k and col < n else 0)
        barrier()
        for e in range(T):
            total += a_tile[thread_idx.y * T + e] * b_tile[e * T + thread_idx.x]
    if row < m and col < n:
        c[row * n + col] = total


def test_a_barrier_opening_each_step_stands_for_the_one_after_the_inner_loop() -> None:
    m, n, k = SIZE
    rewritten_like_the_original(barrier_first, operands(np.int32, m, n, k), grid_2d(m, n),
                                (T, T, 1))


# --------------------------------------------------------------------------- one operand staged


@sarek.kernel
def a_staged(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32):
    a_tile = sarek.shared(f32, 4 * 16)  # 4 rows of 16 along k
    row = block_idx.y * 4 + thread_idx.y
    col = block_idx.x * 16 + thread_idx.x
    total = f32(0.0)
    for t in range(0, k, 16):
        a_tile[thread_idx.y * 16 + thread_idx.x] = (
            a[row * k + t + thread_idx.x] if row < m and t + thread_idx.x < k else 0.0)
        barrier()
        for e in range(16):
            total += a_tile[thread_idx.y * 16 + e] * (
                b[(t + e) * n + col] if t + e < k and col < n else 0.0)
        barrier()
    if row < m and col < n:
        c[row * n + col] = total


def test_only_a_staged_in_a_rectangular_tile() -> None:
    m, n, k = SIZE
    gemm = rewritten_like_the_original(a_staged, operands(np.float32, m, n, k),
                                       (-(-n // 16), -(-m // 4), 1), (16, 4, 1))
    assert gemm.staging is not None and gemm.staging.block == (16, 4, 1)


@sarek.kernel
def b_staged(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    b_tile = sarek.shared(i32, 16 * 4)  # 16 along k by 4 columns
    row = block_idx.y * 16 + thread_idx.y
    col = block_idx.x * 4 + thread_idx.x
    total = 0
    for s in range((k + 15) // 16):
        b_tile[thread_idx.y * 4 + thread_idx.x] = (
            b[(s * 16 + thread_idx.y) * n + col] if s * 16 + thread_idx.y <= k - 1 and col < n
            else 0)
        barrier()
        for e in range(16):
            total += (a[row * k + s * 16 + e] if row < m and s * 16 + e < k else 0) * \
                b_tile[e * 4 + thread_idx.x]
        barrier()
    if row < m and col < n:
        c[row * n + col] = total


def test_only_b_staged_in_a_rectangular_tile() -> None:
    m, n, k = SIZE
    gemm = rewritten_like_the_original(b_staged, operands(np.int32, m, n, k),
                                       (-(-n // 4), -(-m // 16), 1), (4, 16, 1))
    assert gemm.staging is not None and gemm.staging.block == (4, 16, 1)


# --------------------------------------------------------------------------- other layouts


@sarek.kernel
def padded_rows(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32):
    a_tile = sarek.shared(f32, PADDED)
    b_tile = sarek.shared(f32, PADDED)
    row = block_idx.y * T + thread_idx.y
    col = block_idx.x * T + thread_idx.x
    total = f32(0.0)
    for t in range(0, k, T):
        a_tile[thread_idx.y, thread_idx.x] = 0.0
        if row < m and t + thread_idx.x < k:
            a_tile[thread_idx.y, thread_idx.x] = a[row * k + t + thread_idx.x]
        b_tile[thread_idx.y, thread_idx.x] = 0.0
        if t + thread_idx.y < k:  # noqa: SIM102  (nested conditions are the variant under test)
            if col < n:
                b_tile[thread_idx.y, thread_idx.x] = b[(t + thread_idx.y) * n + col]
        barrier()
        for e in range(T):
            total += a_tile[thread_idx.y, e] * b_tile[e, thread_idx.x]
        barrier()
    if row < m and col < n:
        c[row * n + col] = total


def test_padded_tile_layout_and_zero_stores_overwritten_under_a_condition() -> None:
    m, n, k = SIZE
    rewritten_like_the_original(padded_rows, operands(np.float32, m, n, k), grid_2d(m, n),
                                (T, T, 1))


@sarek.kernel
def rows_from_x(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32):
    # numba's fast_matmul: x, y = cuda.grid(2) with x the row; the tiles are indexed [tx, ty]
    s_a = sarek.shared(f32, TILE)
    s_b = sarek.shared(f32, TILE)
    x = block_idx.x * block_dim.x + thread_idx.x
    y = block_idx.y * block_dim.y + thread_idx.y
    tx = thread_idx.x
    ty = thread_idx.y
    tmp = f32(0.0)
    for i in range((k + T - 1) // T):
        s_a[tx, ty] = a[x * k + ty + i * T] if x < m and ty + i * T < k else 0.0
        s_b[tx, ty] = b[(tx + i * T) * n + y] if tx + i * T < k and y < n else 0.0
        barrier()
        for j in range(T):
            tmp += s_a[tx, j] * s_b[j, ty]
        barrier()
    if x < m and y < n:
        c[x * n + y] = tmp


def test_transposed_tiles_with_rows_from_x() -> None:
    m, n, k = SIZE
    rewritten_like_the_original(rows_from_x, operands(np.float32, m, n, k),
                                (-(-m // T), -(-n // T), 1), (T, T, 1))


# --------------------------------------------------------------------------- a 1-D block as a tile


@sarek.kernel
def coalesced(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32):
    row = block_idx.x * T + thread_idx.x // T
    col = block_idx.y * T + thread_idx.x % T
    if row < m and col < n:
        total = f32(0.0)
        for p in range(k):
            total += a[row * k + p] * b[p * n + col]
        c[row * n + col] = total


def test_worklog_coalesced_mapping_of_a_one_d_block() -> None:
    m, n, k = SIZE
    gemm = rewritten_like_the_original(coalesced, operands(np.float32, m, n, k),
                                       (-(-m // T), -(-n // T), 1), (T * T, 1, 1))
    assert "thread_idx.x // 8" in gemm.describe()


@sarek.kernel
def coalesced_tiles(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    a_tile = sarek.shared(i32, T * T)
    b_tile = sarek.shared(i32, T * T)
    inner_row = thread_idx.x // T
    inner_col = thread_idx.x % T
    row = block_idx.x * T + inner_row
    col = block_idx.y * T + inner_col
    total = 0
    for t in range(0, k, T):
        a_tile[inner_row * T + inner_col] = (
            a[row * k + t + inner_col] if row < m and t + inner_col < k else 0)
        b_tile[inner_row * T + inner_col] = (
            b[(t + inner_row) * n + col] if t + inner_row < k and col < n else 0)
        barrier()
        for e in range(T):
            total += a_tile[inner_row * T + e] * b_tile[e * T + inner_col]
        barrier()
    if row < m and col < n:
        c[row * n + col] = total


def test_worklog_shared_memory_kernel_on_a_one_d_block() -> None:
    m, n, k = SIZE
    gemm = rewritten_like_the_original(coalesced_tiles, operands(np.int32, m, n, k),
                                       (-(-m // T), -(-n // T), 1), (T * T, 1, 1))
    assert gemm.staging is not None and gemm.staging.block == (T * T, 1, 1)


def test_a_one_d_tile_mapping_launched_with_other_blocks_is_refused_by_the_region() -> None:
    gemm = recognize(coalesced)
    with pytest.raises(RegionError, match=r"must be \(64, 1, 1\); this launch has \(8, 8, 1\)"):
        region(gemm, (5, 4, 1), (8, 8, 1), {"m": 37, "n": 29, "k": 23})


# --------------------------------------------------------------------------- c[i] += A*B


@sarek.kernel
def add_into_c(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        for p in range(k):
            c[row * n + col] += a[row * k + p] * b[p * n + col]


def test_adding_into_c_inside_the_k_loop_starts_from_its_old_value() -> None:
    m, n, k = SIZE
    gemm = rewritten_like_the_original(add_into_c, operands(np.float32, m, n, k, old_c=True),
                                       grid_2d(m, n), (T, T, 1))
    assert gemm.reads_c and sarek.matrix_pattern.format_expr(gemm.init) == "c[row * n + col]"


@sarek.kernel
def add_into_c_tiles(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    a_tile = sarek.shared(i32, TILE)
    b_tile = sarek.shared(i32, TILE)
    row = block_idx.y * T + thread_idx.y
    col = block_idx.x * T + thread_idx.x
    for tile in range(k // T):
        a_tile[thread_idx.y, thread_idx.x] = a[row * k + tile * T + thread_idx.x]
        b_tile[thread_idx.y, thread_idx.x] = b[(tile * T + thread_idx.y) * n + col]
        barrier()
        for e in range(T):
            c[row * n + col] += a_tile[thread_idx.y, e] * b_tile[e, thread_idx.x]
        barrier()


def test_adding_into_c_inside_a_staged_k_loop() -> None:
    m, n, k = 24, 32, 29
    rewritten_like_the_original(add_into_c_tiles, operands(np.int32, m, n, k, old_c=True),
                                grid_2d(m, n), (T, T, 1))


# --------------------------------------------------------------------------- depth parameters


@sarek.kernel
def counted_tiles(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32,
                  tiles: i32):
    a_tile = sarek.shared(i32, T * T)
    b_tile = sarek.shared(i32, T * T)
    row = block_idx.y * T + thread_idx.y
    col = block_idx.x * T + thread_idx.x
    total = 0
    for s in range(tiles):
        a_tile[thread_idx.y * T + thread_idx.x] = (
            a[row * k + s * T + thread_idx.x] if row < m and s * T + thread_idx.x < k else 0)
        b_tile[thread_idx.y * T + thread_idx.x] = (
            b[(s * T + thread_idx.y) * n + col] if s * T + thread_idx.y < k and col < n else 0)
        barrier()
        for e in range(T):
            total += a_tile[thread_idx.y * T + e] * b_tile[e * T + thread_idx.x]
        barrier()
    if row < m and col < n:
        c[row * n + col] = total


@pytest.mark.parametrize(("tiles", "depth"), [(3, 23), (2, 16)])
def test_a_tile_count_of_its_own_stops_at_the_smaller_of_it_and_the_padding(
        tiles: int, depth: int) -> None:
    m, n, k = SIZE
    args = {**operands(np.int32, m, n, k), "tiles": tiles}
    gemm = rewritten_like_the_original(counted_tiles, args, grid_2d(m, n), (T, T, 1))
    assert sarek.matrix_pattern.format_expr(gemm.k_stop) == "min(k, tiles * 8)"
    assert region(gemm, grid_2d(m, n), (T, T, 1), args).d == depth


@sarek.kernel
def split_loop(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        total = 0
        for s in range(k // 4):
            for e in range(4):
                total += a[row * k + s * 4 + e] * b[(s * 4 + e) * n + col]
        c[row * n + col] = total


def test_a_k_loop_split_in_two_without_shared_memory() -> None:
    m, n, k = SIZE
    gemm = rewritten_like_the_original(split_loop, operands(np.int32, m, n, k), grid_2d(m, n),
                                       (T, T, 1))
    assert gemm.staging is None and sarek.matrix_pattern.format_expr(gemm.k_stop) == "k // 4 * 4"


# --------------------------------------------------------------------------- double buffering


@sarek.kernel
def double_buffered(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    a_tile = sarek.shared(i32, 2 * T * T)
    b_tile = sarek.shared(i32, 2 * T * T)
    row = block_idx.y * T + thread_idx.y
    col = block_idx.x * T + thread_idx.x
    total = 0
    for s in range(k // T):
        half = (s % 2) * T * T  # the step alternates between two buffers: one barrier is enough
        a_tile[half + thread_idx.y * T + thread_idx.x] = a[row * k + s * T + thread_idx.x]
        b_tile[half + thread_idx.y * T + thread_idx.x] = b[(s * T + thread_idx.y) * n + col]
        barrier()
        for e in range(T):
            total += a_tile[half + thread_idx.y * T + e] * b_tile[half + e * T + thread_idx.x]
    c[row * n + col] = total


def test_double_buffered_tiles_with_one_barrier_per_step() -> None:
    m, n, k = 24, 32, 45
    rewritten_like_the_original(double_buffered, operands(np.int32, m, n, k), grid_2d(m, n),
                                (T, T, 1))


BUFFERS = S[(2, 8, 8) : (64, 8, 1)]


@sarek.kernel
def double_buffered_tensors(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32,
                            k: i32):
    a_tiles = sarek.shared(f32, BUFFERS)
    b_tiles = sarek.shared(f32, BUFFERS)
    row = block_idx.y * T + thread_idx.y
    col = block_idx.x * T + thread_idx.x
    total = f32(0.0)
    for t in range(0, k, T):
        which = t // T % 2
        a_tiles[which, thread_idx.y, thread_idx.x] = (
            a[row * k + t + thread_idx.x] if row < m and t + thread_idx.x < k else 0.0)
        b_tiles[which, thread_idx.y, thread_idx.x] = (
            b[(t + thread_idx.y) * n + col] if t + thread_idx.y < k and col < n else 0.0)
        barrier()
        for e in range(T):
            total += a_tiles[which, thread_idx.y, e] * b_tiles[which, e, thread_idx.x]
    if row < m and col < n:
        c[row * n + col] = total


def test_double_buffered_tensors_stepped_by_the_tile() -> None:
    m, n, k = SIZE
    rewritten_like_the_original(double_buffered_tensors, operands(np.float32, m, n, k),
                                grid_2d(m, n), (T, T, 1))


# --------------------------------------------------------------------------- refusals


@sarek.kernel
def grid_bounded(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32):
    s_a = sarek.shared(f32, TILE)
    s_b = sarek.shared(f32, TILE)
    x = block_idx.x * T + thread_idx.x
    y = block_idx.y * T + thread_idx.y
    blocks = grid_dim.x
    tmp = f32(0.0)
    for i in range(blocks):
        s_a[thread_idx.x, thread_idx.y] = a[x * k + thread_idx.y + i * T]
        s_b[thread_idx.x, thread_idx.y] = b[(thread_idx.x + i * T) * n + y]
        barrier()
        for j in range(T):
            tmp += s_a[thread_idx.x, j] * s_b[j, thread_idx.y]
        barrier()
    if x < m and y < n:
        c[x * n + y] = tmp


def test_a_loop_bounded_by_the_grid_is_refused_with_advice_to_bound_it_by_k() -> None:
    reason = refusal(grid_bounded)
    assert "grid_dim.x" in reason and "bound the loop by K" in reason
    assert "varies by invocation" not in reason


@sarek.kernel
def one_barrier(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    a_tile = sarek.shared(i32, T * T)
    b_tile = sarek.shared(i32, T * T)
    row = block_idx.y * T + thread_idx.y
    col = block_idx.x * T + thread_idx.x
    total = 0
    for tile in range(k // T):
        a_tile[thread_idx.y * T + thread_idx.x] = a[row * k + tile * T + thread_idx.x]
        b_tile[thread_idx.y * T + thread_idx.x] = b[(tile * T + thread_idx.y) * n + col]
        barrier()
        for e in range(T):
            total += a_tile[thread_idx.y * T + e] * b_tile[e * T + thread_idx.x]
    c[row * n + col] = total


def test_one_barrier_per_step_is_refused_as_a_race_on_the_next_steps_stores() -> None:
    reason = refusal(one_barrier)
    assert "one barrier per step" in reason and "add barrier() after the inner loop" in reason


@sarek.kernel
def no_barrier_before_reading(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32,
                              k: i32):
    a_tile = sarek.shared(i32, T * T)
    b_tile = sarek.shared(i32, T * T)
    row = block_idx.y * T + thread_idx.y
    col = block_idx.x * T + thread_idx.x
    total = 0
    for tile in range(k // T):
        barrier()
        a_tile[thread_idx.y * T + thread_idx.x] = a[row * k + tile * T + thread_idx.x]
        b_tile[thread_idx.y * T + thread_idx.x] = b[(tile * T + thread_idx.y) * n + col]
        for e in range(T):
            total += a_tile[thread_idx.y * T + e] * b_tile[e * T + thread_idx.x]
        barrier()
    c[row * n + col] = total


def test_stores_read_without_a_barrier_between_are_refused_as_a_race() -> None:
    assert "add barrier() before the inner loop" in refusal(no_barrier_before_reading)


@sarek.kernel
def padding_without_else(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32,
                         k: i32):
    a_tile = sarek.shared(f32, TILE)
    b_tile = sarek.shared(f32, TILE)
    row = block_idx.y * T + thread_idx.y
    col = block_idx.x * T + thread_idx.x
    total = f32(0.0)
    for t in range(0, k, T):
        if row < m and t + thread_idx.x < k:
            a_tile[thread_idx.y, thread_idx.x] = a[row * k + t + thread_idx.x]
        if t + thread_idx.y < k and col < n:
            b_tile[thread_idx.y, thread_idx.x] = b[(t + thread_idx.y) * n + col]
        barrier()
        for e in range(T):
            total += a_tile[thread_idx.y, e] * b_tile[e, thread_idx.x]
        barrier()
    if row < m and col < n:
        c[row * n + col] = total


def test_a_staging_store_without_an_else_branch_is_refused() -> None:
    reason = refusal(padding_without_else)
    assert "in one branch only" in reason and "store 0 in the other branch" in reason


@sarek.kernel
def padded_by_another_depth(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32,
                            k: i32, kb: i32):
    a_tile = sarek.shared(f32, T * T)
    b_tile = sarek.shared(f32, T * T)
    row = block_idx.y * T + thread_idx.y
    col = block_idx.x * T + thread_idx.x
    total = f32(0.0)
    for t in range(0, k, T):
        a_tile[thread_idx.y * T + thread_idx.x] = (
            a[row * k + t + thread_idx.x] if row < m and t + thread_idx.x < k else 0.0)
        b_tile[thread_idx.y * T + thread_idx.x] = (
            b[(t + thread_idx.y) * n + col] if t + thread_idx.y < kb and col < n else 0.0)
        barrier()
        for e in range(T):
            total += a_tile[thread_idx.y * T + e] * b_tile[e * T + thread_idx.x]
        barrier()
    if row < m and col < n:
        c[row * n + col] = total


def test_padding_against_another_depth_parameter_is_refused_naming_it() -> None:
    reason = refusal(padded_by_another_depth)
    assert "kb cannot be shown equal to k" in reason


@sarek.kernel
def counted_by_two_depths(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32,
                          k: i32, kb: i32):
    a_tile = sarek.shared(i32, T * T)
    b_tile = sarek.shared(i32, T * T)
    row = block_idx.y * T + thread_idx.y
    col = block_idx.x * T + thread_idx.x
    total = 0
    for s in range((k + T - 1) // T):
        a_tile[thread_idx.y * T + thread_idx.x] = (
            a[row * k + s * T + thread_idx.x] if row < m and s * T + thread_idx.x < k else 0)
        b_tile[thread_idx.y * T + thread_idx.x] = (
            b[(s * T + thread_idx.y) * n + col] if s * T + thread_idx.y < kb and col < n else 0)
        barrier()
        for e in range(T):
            total += a_tile[thread_idx.y * T + e] * b_tile[e * T + thread_idx.x]
        barrier()
    if row < m and col < n:
        c[row * n + col] = total


def test_operands_zeroed_past_two_depth_parameters_are_refused_naming_both() -> None:
    assert "past different depths (k and kb)" in refusal(counted_by_two_depths)


@sarek.kernel
def guarded_by_another_size(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32,
                            k: i32, rows_a: i32):
    a_tile = sarek.shared(i32, T * T)
    b_tile = sarek.shared(i32, T * T)
    row = block_idx.y * T + thread_idx.y
    col = block_idx.x * T + thread_idx.x
    total = 0
    for t in range(0, k, T):
        a_tile[thread_idx.y * T + thread_idx.x] = (
            a[row * k + t + thread_idx.x] if row < rows_a and t + thread_idx.x < k else 0)
        b_tile[thread_idx.y * T + thread_idx.x] = (
            b[(t + thread_idx.y) * n + col] if t + thread_idx.y < k and col < n else 0)
        barrier()
        for e in range(T):
            total += a_tile[thread_idx.y * T + e] * b_tile[e * T + thread_idx.x]
        barrier()
    if row < m and col < n:
        c[row * n + col] = total


def test_a_row_bound_against_another_size_parameter_is_refused_naming_it() -> None:
    reason = refusal(guarded_by_another_size)
    assert "it bounds the row by rows_a, the guard by m, which cannot be shown equal" in reason


@sarek.kernel
def unpadded_steps(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32):
    a_tile = sarek.shared(f32, T * T)
    b_tile = sarek.shared(f32, T * T)
    row = block_idx.y * T + thread_idx.y
    col = block_idx.x * T + thread_idx.x
    total = f32(0.0)
    for t in range(0, k, T):
        a_tile[thread_idx.y * T + thread_idx.x] = a[row * k + t + thread_idx.x]
        b_tile[thread_idx.y * T + thread_idx.x] = b[(t + thread_idx.y) * n + col]
        barrier()
        for e in range(T):
            total += a_tile[thread_idx.y * T + e] * b_tile[e * T + thread_idx.x]
        barrier()
    c[row * n + col] = total


def test_steps_of_the_tile_past_k_without_zeroing_are_refused_naming_the_zeroing() -> None:
    reason = refusal(unpadded_steps)
    assert "runs past k without zeroing both operands" in reason
    assert "if p < k else 0" in reason


@sarek.kernel
def add_into_half_c(a: Global[f16], b: Global[f16], c: Global[f16], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        for p in range(k):
            c[row * n + col] += a[row * k + p] * b[p * n + col]


def test_adding_into_an_f16_c_is_refused_for_rounding_at_every_step() -> None:
    reason = refusal(add_into_half_c)
    assert "rounded to f16 at every step" in reason and "accumulate in a f32 variable" in reason


@sarek.kernel
def triple_buffered(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    a_tile = sarek.shared(i32, 3 * T * T)
    b_tile = sarek.shared(i32, 3 * T * T)
    row = block_idx.y * T + thread_idx.y
    col = block_idx.x * T + thread_idx.x
    total = 0
    for s in range(k // T):
        third = (s % 3) * T * T
        a_tile[third + thread_idx.y * T + thread_idx.x] = a[row * k + s * T + thread_idx.x]
        b_tile[third + thread_idx.y * T + thread_idx.x] = b[(s * T + thread_idx.y) * n + col]
        barrier()
        for e in range(T):
            total += a_tile[third + thread_idx.y * T + e] * b_tile[third + e * T + thread_idx.x]
    c[row * n + col] = total


def test_tiles_that_move_with_the_step_other_than_by_its_parity_are_refused() -> None:
    assert "other than by picking one of two buffers by the step's parity" in refusal(
        triple_buffered)


@sarek.kernel
def register_blocked(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32):
    results = sarek.local(f32, 4)
    row = (block_idx.y * T + thread_idx.y) * 4
    col = block_idx.x * T + thread_idx.x
    for r in range(4):
        results[r] = 0.0
    for p in range(k):
        for r in range(4):
            results[r] += a[(row + r) * k + p] * b[p * n + col]
    for r in range(4):
        c[(row + r) * n + col] = results[r]


def test_a_register_blocked_kernel_is_refused_naming_its_local_array() -> None:
    reason = refusal(register_blocked)
    assert "the local array 'results'" in reason and "several outputs" in reason


@sarek.kernel
def two_stores_per_step(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    a_tile = sarek.shared(i32, 8 * 16)
    b_tile = sarek.shared(i32, 16 * 16)
    row = block_idx.y * 8 + thread_idx.y
    col = block_idx.x * 16 + thread_idx.x
    total = 0
    for t in range(0, k, 16):
        a_tile[thread_idx.y * 16 + thread_idx.x] = (
            a[row * k + t + thread_idx.x] if row < m and t + thread_idx.x < k else 0)
        b_tile[thread_idx.y * 16 + thread_idx.x] = (
            b[(t + thread_idx.y) * n + col] if t + thread_idx.y < k and col < n else 0)
        b_tile[(thread_idx.y + 8) * 16 + thread_idx.x] = (
            b[(t + thread_idx.y + 8) * n + col] if t + thread_idx.y + 8 < k and col < n else 0)
        barrier()
        for e in range(16):
            total += a_tile[thread_idx.y * 16 + e] * b_tile[e * 16 + thread_idx.x]
        barrier()
    if row < m and col < n:
        c[row * n + col] = total


def test_two_stores_to_one_tile_per_step_are_refused() -> None:
    assert "two stores to the shared array 'b_tile' in one step" in refusal(two_stores_per_step)


@sarek.kernel
def narrow_columns(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32):
    row = block_idx.x * 16 + thread_idx.x // 8
    col = block_idx.y * 16 + thread_idx.x % 8
    if row < m and col < n:
        total = f32(0.0)
        for p in range(k):
            total += a[row * k + p] * b[p * n + col]
        c[row * n + col] = total


def test_a_one_d_tile_whose_columns_do_not_fill_the_block_step_is_refused() -> None:
    assert "do not tile it" in refusal(narrow_columns)


@sarek.kernel
def address_loop(a: Global[f32], b: Global[f32], c: Global[f32], wa: i32, wb: i32):
    # cuda-samples' matrixMul walks A by address: from the block's first row to its last column
    a_tile = sarek.shared(f32, TILE)
    b_tile = sarek.shared(f32, TILE)
    a_begin = wa * T * block_idx.y
    total = f32(0.0)
    for at in range(a_begin, a_begin + wa, T):
        a_tile[thread_idx.y, thread_idx.x] = a[at + wa * thread_idx.y + thread_idx.x]
        b_tile[thread_idx.y, thread_idx.x] = b[(at - a_begin + thread_idx.y) * wb
                                               + T * block_idx.x + thread_idx.x]
        barrier()
        for e in range(T):
            total += a_tile[thread_idx.y, e] * b_tile[e, thread_idx.x]
        barrier()
    c[(block_idx.y * T + thread_idx.y) * wb + block_idx.x * T + thread_idx.x] = total


def test_a_k_loop_over_addresses_is_refused_with_the_loop_to_write_instead() -> None:
    reason = refusal(address_loop)
    assert "varies by invocation (it uses block_idx.y)" in reason
    assert "loop over the reduction index instead" in reason


@sarek.kernel
def moving_offsets(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32):
    a_tile = sarek.shared(f32, T * T)
    b_tile = sarek.shared(f32, T * T)
    inner_row = thread_idx.x // T
    inner_col = thread_idx.x % T
    a_at = block_idx.x * T * k
    b_at = block_idx.y * T
    total = f32(0.0)
    for t in range(0, k, T):
        a_tile[inner_row * T + inner_col] = a[a_at + inner_row * k + inner_col]
        b_tile[inner_row * T + inner_col] = b[b_at + inner_row * n + inner_col]
        barrier()
        a_at += T
        b_at += T * n
        for e in range(T):
            total += a_tile[inner_row * T + e] * b_tile[e * T + inner_col]
        barrier()
    c[(block_idx.x * T + inner_row) * n + block_idx.y * T + inner_col] = total


def test_offsets_advanced_like_pointers_are_refused_with_the_index_to_write() -> None:
    reason = refusal(moving_offsets)
    assert "advances a_at, b_at by a constant each step" in reason


