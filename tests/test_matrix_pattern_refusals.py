"""Kernels that are not GEMM nests are refused with a reason that names the construct."""

from __future__ import annotations

import pytest

import sarek
from sarek import Global, block_dim, block_idx, f16, f32, f64, grid_dim, i32, thread_idx
from sarek.ir import Kernel, Let, Var
from sarek.matrix_pattern import NotAGemm, recognize


def refusal(kernel: object) -> str:
    with pytest.raises(NotAGemm) as info:
        recognize(kernel)
    return info.value.reason


@sarek.kernel
def store_in_loop(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    acc = 0
    for p in range(k):
        acc += a[row * k + p] * b[p * n + col]
        c[row * n + col] = acc


def test_store_inside_the_k_loop() -> None:
    assert "inside the k-loop" in refusal(store_in_loop)


@sarek.kernel
def two_stores(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    acc = 0
    for p in range(k):
        acc += a[row * k + p] * b[p * n + col]
    c[row * n + col] = acc
    c[row * n + col + 1] = acc


def test_two_stores_to_c() -> None:
    assert "two stores to c" in refusal(two_stores)


@sarek.kernel
def reads_acc_early(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    acc = 0
    for p in range(k):
        half = acc // 2
        acc += a[row * k + p] * b[p * n + col] + half
    c[row * n + col] = acc


def test_accumulator_read_before_the_loop_ends() -> None:
    assert "read before the loop ends" in refusal(reads_acc_early)


@sarek.kernel
def square_reduction(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    acc = 0
    for p in range(k):
        acc += a[row * k + p * p] * b[p * n + col]
    c[row * n + col] = acc


def test_non_affine_reduction_index() -> None:
    assert "not affine: it multiplies p by p" in refusal(square_reduction)


@sarek.kernel
def skewed_reduction(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    acc = 0
    for p in range(k):
        acc += a[row * k + (p + col) % k] * b[p * n + col]
    c[row * n + col] = acc


def test_invocation_dependent_reduction_index() -> None:
    assert "is not affine" in refusal(skewed_reduction)


@sarek.kernel
def triangular(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    acc = 0
    for p in range(row):
        acc += a[row * k + p] * b[p * n + col]
    c[row * n + col] = acc


def test_loop_bound_that_varies_by_invocation() -> None:
    assert "varies by invocation (it uses thread_idx.y)" in refusal(triangular)


@sarek.kernel
def mixed_operands(a: Global[f16], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    acc = f32(0.0)
    for p in range(k):
        acc += a[row * k + p] * b[p * n + col]
    c[row * n + col] = acc


def test_operand_element_types_that_differ_are_refused_with_the_widening_to_write() -> None:
    assert refusal(mixed_operands).endswith(
        "different element types: a is f16, b is f32; a matrix unit multiplies operands of one "
        "type: store a as f32 (exact) so that both are f32, or b as f16 if its values fit")


@sarek.kernel
def step_two(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    acc = 0
    for p in range(0, k, 2):
        acc += a[row * k + p] * b[p * n + col]
    c[row * n + col] = acc


def test_loop_step_other_than_one() -> None:
    assert "steps by 2" in refusal(step_two)


@sarek.kernel
def quadratic_row(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    acc = 0
    for p in range(k):
        acc += a[row * row + p] * b[p * n + col]
    c[row * n + col] = acc


def test_index_quadratic_in_the_row() -> None:
    assert "multiplies row by row" in refusal(quadratic_row)


@sarek.kernel
def while_loop(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    acc = 0
    p = 0
    while p < k:
        acc += a[row * k + p] * b[p * n + col]
        p += 1
    c[row * n + col] = acc


def test_while_loop_reduction() -> None:
    assert "while loop" in refusal(while_loop)


@sarek.kernel
def or_guard(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m or col < n:
        acc = 0
        for p in range(k):
            acc += a[row * k + p] * b[p * n + col]
        c[row * n + col] = acc


def test_guard_with_or() -> None:
    assert "uses 'or'" in refusal(or_guard)


@sarek.kernel
def neighbour_read(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = 0
        for p in range(k):
            acc += a[row * k + p] * b[p * n + col]
        c[row * n + col] = acc + c[row * n + col + 1]


def test_epilogue_reading_another_element_of_c() -> None:
    assert "another element than the one the invocation writes" in refusal(neighbour_read)


@sarek.kernel
def ignores_acc(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    acc = 0
    for p in range(k):
        acc += a[row * k + p] * b[p * n + col]
    c[row * n + col] = 0


def test_stored_value_that_ignores_the_accumulator() -> None:
    assert "does not use the accumulator" in refusal(ignores_acc)


@sarek.kernel
def indirect(a: Global[i32], b: Global[i32], c: Global[i32], perm: Global[i32], m: i32, n: i32,
             k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    acc = 0
    for p in range(k):
        acc += a[perm[row] * k + p] * b[p * n + col]
    c[row * n + col] = acc


def test_indirect_operand_index() -> None:
    assert "indirect access" in refusal(indirect)


@sarek.kernel
def triple_product(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32,
                   s: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    acc = 0
    for p in range(k):
        acc += a[row * k + p] * b[p * n + col] * s
    c[row * n + col] = acc


def test_update_with_three_factors() -> None:
    assert "multiplies more than two values" in refusal(triple_product)


@sarek.kernel
def subtracting(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    acc = 0
    for p in range(k):
        acc -= a[row * k + p] * b[p * n + col]
    c[row * n + col] = acc


def test_update_that_subtracts() -> None:
    assert "is not acc + A*B" in refusal(subtracting)


@sarek.kernel
def grid_stride(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x + grid_dim.x
    acc = 0
    for p in range(k):
        acc += a[row * k + p] * b[p * n + col]
    c[row * n + col] = acc


def test_index_using_the_grid_size() -> None:
    assert "uses grid_dim.x" in refusal(grid_stride)


@sarek.kernel
def widened_product(a: Global[f32], b: Global[f32], c: Global[f64], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    acc = f64(0.0)
    for p in range(k):
        acc += a[row * k + p] * b[p * n + col]
    c[row * n + col] = acc


def test_product_rounded_before_widening_to_the_accumulator() -> None:
    assert "computed in f32 and widened to the f64 accumulator" in refusal(widened_product)


@sarek.kernel
def value_guard(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32,
                alpha: f32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n and alpha > 0.0:
        acc = f32(0.0)
        for p in range(k):
            acc += a[row * k + p] * b[p * n + col]
        c[row * n + col] = acc


def test_guard_that_is_not_a_bound() -> None:
    assert "compares f32 values, not indices" in refusal(value_guard)


@sarek.kernel
def no_loop(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    c[row * n + col] = a[row] * b[col]


def test_kernel_without_a_reduction() -> None:
    assert "there is no reduction" in refusal(no_loop)


@sarek.kernel
def elementwise_store_only(a: Global[i32], n: i32):
    i = block_idx.x * block_dim.x + thread_idx.x
    if i < n:
        acc = a[i]
        a[i] = acc + 1


def test_elementwise_kernel() -> None:
    assert "no reduction" in refusal(elementwise_store_only)


@sarek.kernel
def one_coordinate(a: Global[i32], b: Global[i32], c: Global[i32], n: i32, k: i32):
    i = block_idx.x * block_dim.x + thread_idx.x
    if i < n:
        acc = 0
        for p in range(k):
            acc += a[i * k + p] * b[p]
        c[i] = acc


def test_matrix_vector_product_is_not_a_gemm() -> None:
    assert "do not come from two launch coordinates" in refusal(one_coordinate)


def test_ill_formed_ir_is_refused_with_the_checker_finding() -> None:
    k = store_in_loop.ir
    broken = Kernel(name="broken", params=k.params,
                    body=(Let(name="x", type=sarek.ir.ElemType.I32,
                              value=Var(name="nope", type=sarek.ir.ElemType.I32)),))
    assert "not well-formed" in refusal(broken)


def test_something_that_is_not_a_kernel() -> None:
    assert "expected a sarek.ir.Kernel" in refusal(42)


def test_refusal_names_the_source_line() -> None:
    with pytest.raises(NotAGemm) as info:
        recognize(step_two)
    assert info.value.line is not None
    assert str(info.value).startswith(f"line {info.value.line}: ")
