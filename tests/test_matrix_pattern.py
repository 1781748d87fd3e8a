"""Recognition: every bundled example and the syntactic variants users write are GEMM nests,
described with the right operands, strides, bounds, mapping, initial value and epilogue."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import example
from gemm_gen import build_source

import sarek
from sarek import Global, block_dim, block_idx, f16, f32, fma, i32, thread_idx
from sarek.ir import ElemType
from sarek.matrix_pattern import Gemm, Mapping1D, Mapping2D, format_expr, recognize

sim = pytest.importorskip("sim")


def show(e: object) -> str:
    return format_expr(e)  # type: ignore[arg-type]


def strides(acc: object) -> tuple[str, str, str, str, str]:
    return tuple(show(getattr(acc, f)) for f in (  # type: ignore[return-value]
        "offset", "row_stride", "col_stride", "batch_stride", "red_stride"))


def agrees_with_simulation(kernel: sarek.KernelFunction, args: dict, grid: tuple,
                           block: tuple) -> bool:
    from oracle import evaluate

    from sarek.matrix_mapping import region

    g = recognize(kernel)
    out = sim.simulate(kernel.ir, args, grid=grid, block=block)[g.c.array]
    return bool(np.array_equal(evaluate(g, region(g, grid, block, args), args), out))


def int_args(m: int, n: int, k: int, sizes: dict[str, int], **scalars: int) -> dict:
    rng = np.random.default_rng(1)
    out: dict = {name: rng.integers(-2**31, 2**31, size, dtype=np.int64).astype(np.int32)
                 for name, size in sizes.items()}
    return {**out, "m": m, "n": n, "k": k, **scalars}


# --------------------------------------------------------------------------- the examples


def test_every_bundled_example_is_recognized(gemm_example) -> None:
    assert isinstance(recognize(gemm_example.make(8, 8, 8).kernel), Gemm)


def test_naive_example_reads_row_major_a_and_b() -> None:
    g = recognize(example("gemm_f32").make(8, 8, 8).kernel)
    assert strides(g.a) == ("0", "k", "0", "0", "1")
    assert strides(g.b) == ("0", "0", "1", "0", "n")
    assert strides(g.c) == ("0", "n", "1", "0", "0")
    assert (show(g.m), show(g.n), show(g.k_start), show(g.k_stop)) == ("m", "n", "0", "k")


def test_colmajor_b_example_has_unit_reduction_stride_in_b() -> None:
    g = recognize(example("gemm_colmajor_b").make(8, 8, 8).kernel)
    assert g.b_layout == "col"
    assert strides(g.b) == ("0", "0", "k", "0", "1")


def test_batched_example_takes_the_batch_from_z() -> None:
    g = recognize(example("gemm_batched").make(8, 8, 8).kernel)
    assert isinstance(g.mapping, Mapping2D) and g.mapping.batch is not None
    assert g.mapping.batch.axis == "z"
    assert show(g.batches) == "batches"
    assert show(g.a.batch_stride) == "k * m"


def test_one_d_example_is_row_major_over_x_with_a_linear_bound() -> None:
    g = recognize(example("gemm_f32_1d").make(8, 8, 8).kernel)
    assert isinstance(g.mapping, Mapping1D)
    assert (g.mapping.order, show(g.mapping.divisor)) == ("row-major", "n")
    assert show(g.linear_bound) == "m * n"
    assert g.m is None and g.n is None


def test_epilogue_example_reads_c_at_its_own_element() -> None:
    g = recognize(example("gemm_epilogue").make(8, 8, 8).kernel)
    assert show(g.epilogue) == "max(alpha * acc + beta * c[row * n + col], 0.0)"
    assert g.reads_c


def test_f16_example_has_f16_operands_and_an_f32_accumulator() -> None:
    g = recognize(example("gemm_f16").make(8, 8, 8).kernel)
    assert (g.operand_elt, g.acc_type, show(g.epilogue)) == (ElemType.F16, ElemType.F32,
                                                            "f16(acc)")


def test_tiled_example_is_recognized_through_its_shared_staging() -> None:
    g = recognize(example("gemm_tiled").make(8, 8, 8).kernel)
    assert g.staging is not None and g.staging.block == (16, 16, 1)
    assert strides(g.a) == ("0", "k", "0", "0", "1")
    assert strides(g.b) == ("0", "0", "1", "0", "n")


def test_i32_example_accumulates_in_i32_from_zero() -> None:
    g = recognize(example("gemm_i32").make(8, 8, 8).kernel)
    assert (g.acc_type, show(g.init), g.fused) == (ElemType.I32, "0", False)


def test_recognize_accepts_the_decorated_function_itself() -> None:
    assert recognize(commuted_product).kernel == "commuted_product"


# --------------------------------------------------------------------------- variants


@sarek.kernel
def commuted_product(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = 0
        for p in range(k):
            acc = acc + b[p * n + col] * a[row * k + p]
        c[row * n + col] = acc


def test_commuted_product_still_names_a_and_b_by_their_indices() -> None:
    g = recognize(commuted_product)
    assert (g.a.array, g.b.array) == ("a", "b")


@sarek.kernel
def product_first(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = 0
        for p in range(k):
            acc = a[row * k + p] * b[p * n + col] + acc
        c[row * n + col] = acc


def test_product_written_before_the_accumulator_is_recognized() -> None:
    assert not recognize(product_first).fused


@sarek.kernel
def reordered_terms(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    row = thread_idx.y + block_dim.y * block_idx.y
    col = thread_idx.x + block_idx.x * block_dim.x
    if col < n and row < m:
        acc = 0
        for p in range(k):
            acc += a[p + k * row] * b[col + n * p]
        c[col + row * n] = acc


def test_reordered_index_terms_give_the_same_strides() -> None:
    g = recognize(reordered_terms)
    assert strides(g.a) == ("0", "k", "0", "0", "1")
    assert strides(g.b) == ("0", "0", "1", "0", "n")


@sarek.kernel
def fused_update(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = f32(0.0)
        for p in range(k):
            acc = fma(a[row * k + p], b[p * n + col], acc)
        c[row * n + col] = acc


def test_fma_update_is_recognized_as_fused() -> None:
    assert recognize(fused_update).fused


def test_fma_update_description_agrees_with_simulation_bit_for_bit() -> None:
    rng = np.random.default_rng(3)
    m, n, k = 9, 7, 11
    args = {"a": rng.standard_normal(m * k, dtype=np.float32),
            "b": rng.standard_normal(k * n, dtype=np.float32),
            "c": np.zeros(m * n, np.float32), "m": m, "n": n, "k": k}
    assert agrees_with_simulation(fused_update, args, (2, 3, 1), (4, 4, 1))


@sarek.kernel
def parenthesized_strides(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32,
                          k: i32, lda: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = 0
        for p in range(k):
            acc += a[row * (lda + 2) + p] * b[p * (n + 1) + col]
        c[row * (n + 3) + col] = acc


def test_parenthesized_strides_become_stride_expressions() -> None:
    g = recognize(parenthesized_strides)
    assert (show(g.a.row_stride), show(g.b.red_stride), show(g.c.row_stride)) == (
        "lda + 2", "n + 1", "n + 3")


@sarek.kernel
def with_offsets(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32,
                 off: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = 0
        for p in range(k):
            acc += a[off + row * k + p] * b[5 + p * n + col]
        c[2 * off + row * n + col] = acc


def test_offsets_are_kept_apart_from_the_strides() -> None:
    g = recognize(with_offsets)
    assert (show(g.a.offset), show(g.b.offset), show(g.c.offset)) == ("off", "5", "off * 2")


@sarek.kernel
def transposed_a(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = 0
        for p in range(k):
            acc += a[p * m + row] * b[p * n + col]
        c[row * n + col] = acc


def test_transposed_a_is_column_major() -> None:
    g = recognize(transposed_a)
    assert g.a_layout == "col"
    assert strides(g.a) == ("0", "1", "0", "0", "m")


@sarek.kernel
def column_major_c(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = 0
        for p in range(k):
            acc += a[row * k + p] * b[p * n + col]
        c[col * m + row] = acc


def test_column_major_output_is_recognized() -> None:
    assert recognize(column_major_c).c_layout == "col"


@sarek.kernel
def batch_strides(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32,
                  sa: i32, sb: i32, sc: i32, nb: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    z = block_idx.z * block_dim.z + thread_idx.z
    if row < m and col < n and z < nb:
        acc = 0
        for p in range(k):
            acc += a[z * sa + row * k + p] * b[sb * z + p * n + col]
        c[z * sc + row * n + col] = acc


def test_batch_strides_are_parameters() -> None:
    g = recognize(batch_strides)
    assert (show(g.a.batch_stride), show(g.b.batch_stride), show(g.c.batch_stride)) == (
        "sa", "sb", "sc")
    assert g.mapping.batch is not None and g.mapping.batch.uses_thread


@sarek.kernel
def one_d_column_major(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    tid = block_idx.x * block_dim.x + thread_idx.x
    if tid < m * n:
        col = tid // m
        row = tid % m
        acc = 0
        for p in range(k):
            acc += a[row * k + p] * b[p * n + col]
        c[col * m + row] = acc


def test_one_d_column_major_mapping() -> None:
    g = recognize(one_d_column_major)
    assert isinstance(g.mapping, Mapping1D)
    assert (g.mapping.order, show(g.mapping.divisor)) == ("col-major", "m")


def test_one_d_column_major_partial_launch_agrees_with_simulation() -> None:
    m, n, k = 5, 4, 3
    args = int_args(m, n, k, {"a": m * k, "b": k * n, "c": m * n})
    assert agrees_with_simulation(one_d_column_major, args, (3, 1, 1), (4, 1, 1))


@sarek.kernel
def early_return(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row >= m or col >= n:
        return
    acc = 0
    for p in range(k):
        acc += a[row * k + p] * b[p * n + col]
    c[row * n + col] = acc


def test_early_return_guard_gives_the_bounds() -> None:
    g = recognize(early_return)
    assert (show(g.m), show(g.n)) == ("m", "n")


@sarek.kernel
def nested_guards(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m:  # noqa: SIM102  (nested guards are the variant under test)
        if col <= n - 1:
            acc = 0
            for p in range(k):
                acc += a[row * k + p] * b[p * n + col]
            c[row * n + col] = acc


def test_nested_guards_and_inclusive_bounds() -> None:
    g = recognize(nested_guards)
    assert (show(g.m), show(g.n)) == ("m", "n")


@sarek.kernel
def split_statements(a: Global[f32], b: Global[f32], c: Global[f32], bias: Global[f32], m: i32,
                     n: i32, k: i32, alpha: f32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = bias[col]
        for p in range(k):
            x = a[row * k + p]
            y = b[p * n + col]
            acc += x * y
        scaled = alpha * acc
        c[row * n + col] = min(max(scaled, -1.0), 1.0)


def test_temporaries_are_inlined_into_init_product_and_epilogue() -> None:
    g = recognize(split_statements)
    assert show(g.init) == "bias[col]"
    assert show(g.epilogue) == "min(max(alpha * acc, -1.0), 1.0)"


@sarek.kernel
def row_from_x(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    row = block_idx.x * block_dim.x + thread_idx.x
    col = block_idx.y * block_dim.y + thread_idx.y
    if row < m and col < n:
        acc = 0
        for p in range(k):
            acc += a[row * k + p] * b[p * n + col]
        c[row * n + col] = acc


def test_row_may_come_from_x_and_column_from_y() -> None:
    g = recognize(row_from_x)
    assert isinstance(g.mapping, Mapping2D)
    assert (g.mapping.row.axis, g.mapping.col.axis) == ("x", "y")


@sarek.kernel
def shifted_strides(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = 0
        for p in range(1, k):
            acc += a[(row << 4) + p] * b[p * 16 + col]
        c[row * 16 + col] = acc


def test_shifts_by_constants_are_multiplications_and_the_loop_may_start_late() -> None:
    g = recognize(shifted_strides)
    assert (show(g.a.row_stride), show(g.k_start)) == ("16", "1")


@sarek.kernel
def f16_accumulate_into_c(a: Global[f16], b: Global[f16], c: Global[f32], m: i32, n: i32,
                          k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = c[row * n + col]
        for p in range(k):
            acc += a[row * k + p] * b[p * n + col]
        c[row * n + col] = acc


def test_initial_value_may_read_c_at_the_output() -> None:
    g = recognize(f16_accumulate_into_c)
    assert show(g.init) == "c[row * n + col]"
    assert g.operand_elt is ElemType.F16


def test_generated_source_text_is_recognized() -> None:
    kernel = build_source(
        "def gemm(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):\n"
        "    row = block_idx.y * block_dim.y + thread_idx.y\n"
        "    col = block_idx.x * block_dim.x + thread_idx.x\n"
        "    if row < m and col < n:\n"
        "        acc = 0\n"
        "        for p in range(k):\n"
        "            acc += a[row * k + p] * b[p * n + col]\n"
        "        c[row * n + col] = acc\n")
    assert recognize(kernel).kernel == "gemm"


def test_describe_names_every_fact() -> None:
    text = recognize(example("gemm_epilogue").make(8, 8, 8).kernel).describe()
    for fact in ("C[row, col]", "A[row, p]", "B[p, col]", "mapping", "bounds", "reduction",
                 "init", "epilogue"):
        assert fact in text


@sarek.kernel
def column_by_subtraction(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32,
                          k: i32):
    tid = block_idx.x * block_dim.x + thread_idx.x
    if tid < m * n:
        row = tid // n
        col = tid - row * n
        acc = 0
        for p in range(k):
            acc += a[row * k + p] * b[p * n + col]
        c[tid] = acc


def test_one_d_column_may_be_computed_by_subtraction() -> None:
    g = recognize(column_by_subtraction)
    assert isinstance(g.mapping, Mapping1D) and g.mapping.order == "row-major"
    assert strides(g.c) == ("0", "n", "1", "0", "0")
