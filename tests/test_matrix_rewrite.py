"""The rewrite onto matrix fragments: every example, lowering, subgroup and fragment gives the
original kernel's bits where the lowering promises them; the rewritten signature, launch
dimensions, shared-memory budget and ``rewrite_launch``; and the requests that are refused.

The reference is always the original kernel simulated with its own launch. Inputs are chosen
so that each lowering promises bit-identity on them: any int32 values for the byte planes
(products and sums wrap modulo 2^32 in both), small integers for the float lowerings (every
operand, product and partial sum is exact in f16, bf16 and f32), and any f16 values for
``F16_operands`` on f16 arrays under the ``sequential`` model (the f16 products are exact in
f32 and are added to the accumulator in k order, as the original adds them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from conftest import GEMM_EXAMPLES, example
from gemm_gen import build_source

from sarek import ir
from sarek.ir import Builtin, ElemType
from sarek.ir_format import format_expr
from sarek.ir_walk import walk
from sarek.launch import Launch
from sarek.matrix_mapping import region
from sarek.matrix_pattern import Gemm, NotAGemm, recognize
from sarek.matrix_rewrite import EXTRA_NAMES, RewriteError, kernel, launch_dims, rewrite_launch
from sarek.matrix_scheme import CHUNK, Lowering
from sarek.schedule import SEED, Schedule
from sarek.staging import DENSE, Staging

sim = pytest.importorskip("sim")

I32_MIN, I32_MAX = -(2**31), 2**31 - 1
CONFIGS = [(32, 16), (32, 8), (64, 16), (64, 8)]  # (subgroup, fragment)
APPLICABLE = {
    ElemType.I32: (Lowering.INT32_BYTE_PLANES,),
    ElemType.I8: (Lowering.INT8_OPERANDS,),
    ElemType.U8: (Lowering.INT8_OPERANDS,),
    ElemType.F16: (Lowering.F16_OPERANDS,),
    ElemType.F32: (Lowering.BF16X3_OPERANDS, Lowering.BF16_OPERANDS, Lowering.F16_OPERANDS),
}
SIZE = (70, 45, 37)  # ragged rows and columns; the last reduction step is partial

Values = Callable[[int, np.dtype], np.ndarray]  # (size, dtype) -> an operand array


def operand_elt(name: str) -> ElemType:
    return recognize(example(name).make(4, 4, 4).kernel).operand_elt


FLOAT_CASES = [(name, low) for name in GEMM_EXAMPLES if operand_elt(name).is_float
               for low in APPLICABLE[operand_elt(name)]]


# --------------------------------------------------------------------------- helpers


def bits(x: np.ndarray) -> np.ndarray:
    """The array's bit patterns (so that -0.0, +0.0 and NaN payloads compare exactly)."""
    return x.view(f"u{x.dtype.itemsize}")


def with_operands(launch: Launch, values: Values) -> Launch:
    """``launch`` with its A and B arrays replaced by ``values(size, dtype)``."""
    gemm = recognize(launch.kernel)
    args = dict(launch.args)
    for name in (gemm.a.array, gemm.b.array):
        args[name] = values(args[name].size, args[name].dtype)
    return replace(launch, args=args)


def original(launch: Launch) -> np.ndarray:
    """C after the original kernel, simulated with its own launch."""
    return launch.simulate()[recognize(launch.kernel).c.array]


def rewritten(launch: Launch, lowering: Lowering, subgroup: int = 32, frag: int = 16,
              arith: str = "sequential", gemm: Gemm | None = None,
              schedule: Schedule = SEED, staging: Staging = DENSE,
              depth: bool = False) -> np.ndarray:
    """C after the rewritten kernel, simulated with ``launch_dims`` and the region's
    arguments appended to the original's; with ``depth`` the rewrite is told the region's
    reduction depth (as ``rewrite_launch`` tells it)."""
    gemm = gemm or recognize(launch.kernel)
    reg = region(gemm, launch.grid, launch.block, dict(launch.args))
    rw = kernel(launch.kernel, gemm, lowering, subgroup, frag, staging=staging,
                schedule=schedule, depth=reg.d if depth else None)
    block, grid = launch_dims(subgroup, me=reg.me, ne=reg.ne, ze=reg.ze, schedule=schedule)
    args = [*launch.arg_list(), *reg.args]
    out = sim.simulate(rw, args, grid=grid, block=block, subgroup=subgroup, arith=arith)
    c: np.ndarray = out[gemm.c.array]
    return c


def small_integers(seed: int) -> Values:
    rng = np.random.default_rng(seed)
    return lambda size, dtype: rng.integers(-8, 9, size).astype(dtype)


def near_int32_limits(seed: int) -> Values:
    """Values at and near INT_MIN and INT_MAX (all-ones and all-zero byte planes, carries
    through every plane), with a few small ones."""
    rng = np.random.default_rng(seed)
    pool = np.concatenate([I32_MIN + np.arange(64), I32_MAX - np.arange(64),
                           [-(2**30), 2**30, -1, 0, 1, 255, 256, -256]])
    return lambda size, dtype: rng.choice(pool, size).astype(dtype)


# --------------------------------------------------------------------------- bit-identity


@pytest.mark.parametrize(("subgroup", "frag"), CONFIGS)
def test_byte_planes_are_bit_identical_on_full_range_int32(subgroup: int, frag: int) -> None:
    launch = example("gemm_i32").make(*SIZE, seed=1)  # uniform over the whole int32 range
    assert np.array_equal(rewritten(launch, Lowering.INT32_BYTE_PLANES, subgroup, frag),
                          original(launch))


@pytest.mark.parametrize(("subgroup", "frag"), CONFIGS)
def test_byte_planes_are_bit_identical_near_the_int32_limits(subgroup: int, frag: int) -> None:
    launch = with_operands(example("gemm_i32").make(*SIZE), near_int32_limits(2))
    assert np.array_equal(rewritten(launch, Lowering.INT32_BYTE_PLANES, subgroup, frag),
                          original(launch))


@pytest.mark.parametrize(("subgroup", "frag"), CONFIGS)
@pytest.mark.parametrize(("name", "lowering"), FLOAT_CASES,
                         ids=[f"{n}-{low.value}" for n, low in FLOAT_CASES])
def test_float_lowering_is_bit_identical_on_small_integer_operands(
        name: str, lowering: Lowering, subgroup: int, frag: int) -> None:
    launch = with_operands(example(name).make(*SIZE, seed=3), small_integers(4))
    assert np.array_equal(bits(rewritten(launch, lowering, subgroup, frag)),
                          bits(original(launch)))


@pytest.mark.parametrize(("subgroup", "frag"), CONFIGS)
def test_f16_operands_are_bit_identical_on_random_f16_under_the_sequential_model(
        subgroup: int, frag: int) -> None:
    rng = np.random.default_rng(5)

    def spread(size: int, dtype: np.dtype) -> np.ndarray:
        # Magnitudes from 2^-8 to 2^8, so that the f32 sums round at varying positions.
        return (rng.standard_normal(size) * 2.0 ** rng.integers(-8, 9, size)).astype(dtype)

    for launch in (example("gemm_f16").make(*SIZE, seed=6),
                   with_operands(example("gemm_f16").make(*SIZE), spread)):
        got = rewritten(launch, Lowering.F16_OPERANDS, subgroup, frag)
        assert np.array_equal(bits(got), bits(original(launch)))


STAGED_INIT_F16 = """
from sarek import f16

def bias_f16(a: Global[f16], b: Global[f16], c: Global[f16], bias: Global[f16], m: i32, n: i32,
             k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = f32(c[row * n + col]) + f32(bias[col])
        for p in range(k):
            acc += a[row * k + p] * b[p * n + col]
        c[row * n + col] = acc
"""


@pytest.mark.parametrize(("subgroup", "frag"), CONFIGS)
def test_f16_operands_with_a_staged_initial_value_are_bit_identical_on_random_f16(
        subgroup: int, frag: int) -> None:
    # The initial value varies by output, so it reaches the accumulator through shared memory;
    # the products are then added to it in k order, as in the original.
    m, n, k = SIZE
    rng = np.random.default_rng(7)
    args = {x: rng.standard_normal(size).astype(np.float16)
            for x, size in (("a", m * k), ("b", k * n), ("c", m * n), ("bias", n))}
    launch = Launch(build_source(STAGED_INIT_F16, "bias_f16").ir, {**args, "m": m, "n": n,
                    "k": k}, (3, 5, 1), (16, 16, 1))
    got = rewritten(launch, Lowering.F16_OPERANDS, subgroup, frag)
    assert np.array_equal(bits(got), bits(original(launch)))


NEGATIVE_ZERO_INIT = """
def neg_zero(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = c[row * n + col]
        for p in range(k):
            acc += a[row * k + p] * b[p * n + col]
        c[row * n + col] = acc
"""


@pytest.mark.parametrize("lowering", [Lowering.F16_OPERANDS, Lowering.BF16_OPERANDS])
@pytest.mark.parametrize("frag", [16, 8])
def test_negative_zero_sum_survives_the_padding_past_the_reduction_depth(
        lowering: Lowering, frag: int) -> None:
    # acc = -0.0 + 0 * (-1) stays -0.0 in the original; the zero padding of the last step
    # must not turn it into +0.0.
    m, n, k = 5, 6, 3
    args = {"a": np.zeros(m * k, np.float32), "b": -np.ones(k * n, np.float32),
            "c": np.full(m * n, -0.0, np.float32), "m": m, "n": n, "k": k}
    launch = Launch(build_source(NEGATIVE_ZERO_INIT, "neg_zero").ir, args, (1, 1, 1), (8, 8, 1))
    assert np.signbit(original(launch)).all()
    assert np.array_equal(bits(rewritten(launch, lowering, frag=frag)), bits(original(launch)))


# --------------------------------------------------------------------------- Bf16x3's sums

BF16X3_PRODUCTS = [(1, 1), (2, 0), (0, 2), (1, 0), (0, 1), (0, 0)]  # (A term, B term)


def reduction_loop(rw: ir.Kernel) -> ir.For:
    return next(s for s in walk(rw.body) if isinstance(s, ir.For) and s.var == "sk_k0")


def holding(body: tuple[ir.Stmt, ...], stmt: ir.Stmt) -> list[ir.Stmt]:
    """The block of ``body`` (itself or one nested in it) that holds ``stmt``."""
    if stmt in body:
        return list(body)
    for s in walk(body):
        for block in (getattr(s, "body", ()), getattr(s, "then", ()), getattr(s, "orelse", ())):
            if block and stmt in block:
                return list(block)
    raise AssertionError("not in the body")


def chunk_end(s: ir.Stmt) -> bool:
    """Whether ``s`` is the step's end that adds the running sums to their totals."""
    return isinstance(s, ir.If) and any(isinstance(x, ir.FragAdd) and x.d.startswith("sk_tot")
                                        for x in s.then)


def step_statements(rw: ir.Kernel) -> list[ir.Stmt]:
    """The fills, multiply-accumulates and adds of one step of the reduction loop (the
    chunks' ends left out)."""
    body = [s for s in reduction_loop(rw).body if not chunk_end(s)]
    return [s for s in walk(body) if isinstance(s, ir.FragFill | ir.FragMulAdd | ir.FragAdd)]


@pytest.mark.parametrize("frag", [16, 8])
def test_bf16x3_sums_each_sub_step_in_fresh_accumulators_then_adds_them_to_the_running_ones(
        frag: int) -> None:
    launch = example("gemm_f32").make(8, 8, 8)
    rw = kernel(launch.kernel, recognize(launch.kernel), Lowering.BF16X3_OPERANDS, frag=frag)
    frags = (32 // frag) ** 2
    ops = step_statements(rw)
    per_sub_step = frags + 6 * frags + frags
    assert len(ops) == 16 // frag * per_sub_step
    for start in range(0, len(ops), per_sub_step):
        fills = ops[start:start + frags]
        products = ops[start + frags:start + 7 * frags]
        adds = ops[start + 7 * frags:start + per_sub_step]
        fresh = [s.frag for s in fills if isinstance(s, ir.FragFill)]
        assert len(set(fresh)) == frags and not any(f.startswith("sk_acc") for f in fresh)
        for s in fills:  # -0.0: the identity of addition, whatever the running sum's sign
            assert isinstance(s, ir.FragFill) and isinstance(s.value, ir.Const)
            assert s.value.value == 0 and np.signbit(s.value.value)
        for f in fresh:
            into = [s for s in products if isinstance(s, ir.FragMulAdd) and s.d == f]
            assert all(s.c == f for s in into)
            assert [(int(s.a[5]), int(s.b[5])) for s in into] == BF16X3_PRODUCTS  # sk_fa<t>_i
        assert len(adds) == frags
        for s, f in zip(adds, fresh, strict=True):
            assert isinstance(s, ir.FragAdd) and s.b == f
            assert s.d == s.a and s.d.startswith("sk_acc0_")
        assert {s.d for s in adds if isinstance(s, ir.FragAdd)} == {
            f"sk_acc0_{i}_{j}" for i in range(32 // frag) for j in range(32 // frag)}


@pytest.mark.parametrize("schedule", ["t64k16", "t64k64", "t64k32p", "t128k64s2"])
def test_bf16x3_running_sums_go_to_totals_at_each_chunks_end(schedule: str) -> None:
    """Totals start at -0.0 before the loop; a step that ends a multiple of ``CHUNK`` adds
    each running sum to its total and starts the running sum again at -0.0; after the loop
    each running accumulator takes ``total + running``."""
    launch = example("gemm_f32").make(8, 8, 8)
    sched = Schedule.parse(schedule)
    rw = kernel(launch.kernel, recognize(launch.kernel), Lowering.BF16X3_OPERANDS,
                schedule=sched)
    loop = reduction_loop(rw)
    [end] = [s for s in walk(loop.body) if chunk_end(s)]
    assert isinstance(end, ir.If) and not end.orelse
    assert format_expr(end.cond) == f"(sk_k0 + {sched.step}) % {CHUNK} == 0"
    running = sorted({s.d for s in step_statements(rw) if isinstance(s, ir.FragAdd)})
    assert running
    pairs = list(zip(end.then[::2], end.then[1::2], strict=True))
    assert [p.a for p, _ in pairs] == [p.d for p, _ in pairs]
    assert sorted(p.b for p, _ in pairs) == running
    for add_, fill in pairs:
        assert isinstance(add_, ir.FragAdd) and isinstance(fill, ir.FragFill)
        assert add_.d == add_.b.replace("sk_acc", "sk_tot") and fill.frag == add_.b
        assert isinstance(fill.value, ir.Const) and np.signbit(fill.value.value)
    # around the loop, in the block that holds it
    block = holding(rw.body, loop)
    at = block.index(loop)
    before = [s for s in block[:at] if isinstance(s, ir.FragFill) and s.frag.startswith("sk_tot")]
    assert sorted(s.frag for s in before) == sorted(p.d for p, _ in pairs)
    assert all(isinstance(s.value, ir.Const) and np.signbit(s.value.value) for s in before)
    after = [s for s in block[at + 1:] if isinstance(s, ir.FragAdd)]
    assert sorted((s.d, s.a, s.b) for s in after) == sorted(
        (r, r.replace("sk_acc", "sk_tot"), r) for r in running)


@pytest.mark.parametrize("schedule", ["t64k16", "t64k64", "t64k32p", "t128k64s2"])
def test_under_chunk_loops_a_loop_over_the_chunks_takes_the_totals_after_their_steps(
        schedule: str) -> None:
    launch = example("gemm_f32").make(8, 8, 8)
    sched = Schedule.parse(schedule)
    rw = kernel(launch.kernel, recognize(launch.kernel), Lowering.BF16X3_OPERANDS,
                staging=replace(DENSE, chunk_loops=True), schedule=sched)
    [outer] = [s for s in walk(rw.body) if isinstance(s, ir.For) and s.var == "sk_kc"]
    assert format_expr(outer.step) == str(CHUNK)
    inner, *taken = outer.body
    assert isinstance(inner, ir.For) and inner.var == "sk_k0"
    assert format_expr(inner.start) == "sk_kc" and format_expr(inner.step) == str(sched.step)
    assert not [s for s in walk(inner.body) if chunk_end(s)]
    assert taken and all(isinstance(s, ir.FragAdd | ir.FragFill) for s in taken)
    assert {s.d for s in taken if isinstance(s, ir.FragAdd)} == {
        s.d.replace("sk_acc", "sk_tot") for s in step_statements(rw) if isinstance(s, ir.FragAdd)}


def test_bf16x3_refuses_steps_that_do_not_divide_its_chunks() -> None:
    launch = example("gemm_f32").make(8, 8, 8)
    with pytest.raises(RewriteError, match=r"totals every 128 of k, which 48-deep steps do "
                                           r"not divide: take steps of 16, 32 or 64"):
        kernel(launch.kernel, recognize(launch.kernel), Lowering.BF16X3_OPERANDS,
               schedule=Schedule.parse("t64k48"))
    kernel(launch.kernel, recognize(launch.kernel), Lowering.F16_OPERANDS,
           schedule=Schedule.parse("t64k48"))  # the other lowerings keep 48-deep steps


@pytest.mark.parametrize("schedule", ["t64k16", "t128k64s2"])
def test_bf16x3_takes_hi_hi_exactly_in_reductions_of_at_most_one_chunk(schedule: str) -> None:
    """At depths up to ``CHUNK`` each fragment's sub-step is: hi·hi from -0.0 into
    ``sk_top``; ``sk_step`` = -0.0 - ``sk_top``; hi·hi again onto it, then the five smaller
    products in their order; ``sk_step`` = ``sk_top`` + ``sk_step``; the running add. No
    totals. Deeper reductions keep the six products and the totals."""
    sched = Schedule.parse(schedule)
    for depth, exact in ((CHUNK, True), (CHUNK + 16, False)):
        launch = example("gemm_f32").make(8, 8, depth)
        rw = rewrite_launch(launch, lowering=Lowering.BF16X3_OPERANDS, schedule=sched)
        names = {s.name for s in walk(rw.launch.kernel.body) if isinstance(s, ir.FragDecl)}
        assert any(n.startswith("sk_top") for n in names) is exact
        assert any(n.startswith("sk_tot") for n in names) is not exact
        if not exact:
            continue
        ops = [s for s in step_statements(rw.launch.kernel)
               if isinstance(s, ir.FragFill | ir.FragMulAdd | ir.FragAdd)]
        top, step, acc = "sk_top0_0_0", "sk_step0_0_0", "sk_acc0_0_0"
        mine = [s for s in ops if {getattr(s, f, None) for f in ("frag", "d", "b")}
                & {top, step}]
        described = [(type(s).__name__, getattr(s, "frag", None) or s.d,
                      getattr(s, "a", None), getattr(s, "b", None),
                      getattr(s, "subtract", None)) for s in mine]
        hh = ("sk_fa0_0", "sk_fb0_0")
        smaller = [(f"sk_fa{ta}_0", f"sk_fb{tb}_0") for ta, tb in
                   ((1, 1), (2, 0), (0, 2), (1, 0), (0, 1))]
        assert described == (sched.step // 16) * [
            ("FragFill", top, None, None, None),
            ("FragMulAdd", top, *hh, None),
            ("FragFill", step, None, None, None),
            ("FragAdd", step, step, top, True),
            ("FragMulAdd", step, *hh, None),
            *(("FragMulAdd", step, a, b, None) for a, b in smaller),
            ("FragAdd", step, top, step, False),
            ("FragAdd", acc, acc, step, False)]


@pytest.mark.parametrize(("name", "lowering"), [
    ("gemm_f32", Lowering.F16_OPERANDS), ("gemm_f32", Lowering.BF16_OPERANDS),
    ("gemm_i32", Lowering.INT32_BYTE_PLANES)])
def test_the_other_lowerings_accumulate_their_products_in_the_running_accumulators(
        name: str, lowering: Lowering) -> None:
    launch = example(name).make(8, 8, 8)
    rw = kernel(launch.kernel, recognize(launch.kernel), lowering)
    ops = step_statements(rw)
    assert ops and all(isinstance(s, ir.FragMulAdd) and s.d == s.c
                       and s.d.startswith("sk_acc") for s in ops)


def test_bf16x3_leaves_a_negative_zero_sum_negative_when_a_step_adds_only_negative_zeros(
        ) -> None:
    # Every term of -2^-140 is -0.0 in bf16 (below its smallest subnormal), and those of 1.0
    # other than hi are +0.0, so each of the six products is -0.0; k = 16 leaves no padding.
    # Added in k order to the -0.0 initial value (C's old value) they give -0.0, and so does
    # the fresh accumulator that starts at -0.0 before it is added: one that started at +0.0
    # would make the sum +0.0.
    m, n, k = 5, 6, 16
    args = {"a": np.full(m * k, -(2.0**-140), np.float32), "b": np.ones(k * n, np.float32),
            "c": np.full(m * n, -0.0, np.float32), "m": m, "n": n, "k": k}
    launch = Launch(build_source(NEGATIVE_ZERO_INIT, "neg_zero").ir, args, (1, 1, 1), (8, 8, 1))
    for frag in (16, 8):
        got = rewritten(launch, Lowering.BF16X3_OPERANDS, frag=frag)
        assert (bits(got) == 0x80000000).all()
        # Taking hi·hi exactly (a depth of one chunk) negates its first sum, -0.0, by
        # subtracting it from -0.0, which gives +0.0: the sub-step's sum is +0.0, as the
        # specification states, and so is -0.0 + +0.0
        exact = rewritten(launch, Lowering.BF16X3_OPERANDS, frag=frag, depth=True)
        assert (bits(exact) == 0).all()


# --------------------------------------------------------------------------- the launch


@pytest.mark.parametrize(("subgroup", "me", "ne", "ze", "block", "grid"), [
    (32, 64, 64, 1, (128, 1, 1), (1, 1, 1)),
    (32, 70, 45, 1, (128, 1, 1), (1, 2, 1)),
    (64, 65, 129, 3, (256, 1, 1), (3, 2, 3)),
    (64, 1, 1, 1, (256, 1, 1), (1, 1, 1)),
])
def test_launch_dims_is_four_waves_per_64x64_tile_and_a_layer_per_batch(
        subgroup: int, me: int, ne: int, ze: int, block: tuple[int, int, int],
        grid: tuple[int, int, int]) -> None:
    assert launch_dims(subgroup, me=me, ne=ne, ze=ze) == (block, grid)


@pytest.mark.parametrize(("me", "ne", "ze", "grid"), [
    (0, 10, 1, (1, 0, 1)), (10, 0, 1, (0, 1, 1)), (10, 10, 0, (1, 1, 0)), (0, 0, 0, (0, 0, 0)),
])
def test_launch_dims_gives_zero_grid_dimensions_for_zero_extents(
        me: int, ne: int, ze: int, grid: tuple[int, int, int]) -> None:
    assert launch_dims(32, me=me, ne=ne, ze=ze) == ((128, 1, 1), grid)


def test_rewritten_parameters_are_the_originals_then_the_five_region_values() -> None:
    launch = example("gemm_epilogue").make(8, 8, 8)
    rw = kernel(launch.kernel, recognize(launch.kernel), Lowering.BF16X3_OPERANDS)
    assert rw.params[:len(launch.kernel.params)] == launch.kernel.params
    assert [(p.name, p.elem) for p in rw.params[len(launch.kernel.params):]] == [
        (n, ElemType.I32) for n in EXTRA_NAMES]


# Bytes of shared memory: the staged A (64x16) and B (16x64) tiles per term or byte plane,
# plus the 64x64 accumulator exchange array of 4-byte f32 or i32.
# Per term: the A (64 x 16) and B (16 x 64) tiles, dense in the neutral staging; with 16
# bytes of row padding 16-bit rows grow by 8 elements (A 64 x 24, B 16 x 72), 8-bit ones do
# not. Plus the exchange array: one 16x16 fragment of 4-byte f32 or i32 per wave.
DENSE_16, PADDED_16 = 2 * (64 * 16 + 16 * 64), 2 * (64 * 24 + 16 * 72)
TERMS = {Lowering.F16_OPERANDS: 1, Lowering.BF16_OPERANDS: 1, Lowering.BF16X3_OPERANDS: 3}
EXCHANGE = 4 * 4 * 16 * 16
BYTE_PLANES = 4 * (64 * 16 + 16 * 64) + EXCHANGE


def shared_bytes(lowering: Lowering, padded: bool) -> int:
    if lowering is Lowering.INT32_BYTE_PLANES:
        return BYTE_PLANES
    return TERMS[lowering] * (PADDED_16 if padded else DENSE_16) + EXCHANGE


ITEMSIZE = {ElemType.F16: 2, ElemType.BF16: 2, ElemType.U8: 1, ElemType.F32: 4,
            ElemType.I32: 4}


@pytest.mark.parametrize(("name", "lowering"), [
    ("gemm_f32", Lowering.F16_OPERANDS), ("gemm_f32", Lowering.BF16_OPERANDS),
    ("gemm_f32", Lowering.BF16X3_OPERANDS), ("gemm_i32", Lowering.INT32_BYTE_PLANES)])
@pytest.mark.parametrize("subgroup", [32, 64])
@pytest.mark.parametrize("staging", [DENSE, Staging(row_pad_bytes=16, narrow_b_col_major=True)],
                         ids=["dense", "padded"])
def test_shared_memory_budget_per_lowering(name: str, lowering: Lowering, subgroup: int,
                                           staging: Staging) -> None:
    launch = example(name).make(8, 8, 8)
    rw = kernel(launch.kernel, recognize(launch.kernel), lowering, subgroup, staging=staging)
    shared = [s for s in walk(rw.body)
              if isinstance(s, ir.ArrayDecl) and s.space is ir.MemSpace.SHARED]
    want = shared_bytes(lowering, padded=staging.row_pad_bytes > 0)
    assert sum(s.size * ITEMSIZE[s.elem] for s in shared) == want


def test_rewrite_launch_is_the_rewrite_with_the_region_appended() -> None:
    launch = example("gemm_batched").make(20, 30, 9)
    gemm = recognize(launch.kernel)
    reg = region(gemm, launch.grid, launch.block, dict(launch.args))
    got = rewrite_launch(launch, lowering=Lowering.BF16_OPERANDS, subgroup=64, frag=8)
    assert got.launch.kernel == kernel(launch.kernel, gemm, Lowering.BF16_OPERANDS, 64, 8)
    assert (got.launch.block, got.launch.grid) == launch_dims(64, me=20, ne=30, ze=3)
    assert got.launch.arg_list() == [*launch.arg_list(), *reg.args]
    assert (got.region, got.lowering, got.subgroup, got.frag) == (
        reg, Lowering.BF16_OPERANDS, 64, 8)


@pytest.mark.parametrize(("name", "precision", "lowering"), [
    ("gemm_f32", "accurate", Lowering.BF16X3_OPERANDS),
    ("gemm_f32", "fast", Lowering.BF16_OPERANDS),
    ("gemm_f16", "accurate", Lowering.F16_OPERANDS),
    ("gemm_i32", "accurate", Lowering.INT32_BYTE_PLANES)])
def test_rewrite_launch_selects_the_lowering_for_the_precision(
        name: str, precision: Any, lowering: Lowering) -> None:
    assert rewrite_launch(example(name).make(8, 8, 8), precision=precision).lowering is lowering


def test_rewrite_launch_simulates_to_the_originals_bits() -> None:
    launch = example("gemm_i32").make(33, 70, 20)
    rw = rewrite_launch(launch, subgroup=64)
    assert np.array_equal(rw.launch.simulate(subgroup=64)["c"], original(launch))


# --------------------------------------------------------------------------- refusals


def naive(name: str = "gemm_f32") -> tuple[ir.Kernel, Gemm]:
    k = example(name).make(8, 8, 8).kernel
    return k, recognize(k)


def refusal(original: ir.Kernel, gemm: Gemm, lowering: Lowering, subgroup: int = 32,
            frag: int = 16) -> str:
    with pytest.raises(RewriteError) as info:
        kernel(original, gemm, lowering, subgroup, frag)
    return info.value.reason


def test_subgroup_48_is_refused_with_the_supported_sizes() -> None:
    assert refusal(*naive(), Lowering.BF16X3_OPERANDS, subgroup=48) == (
        "subgroup 48 has no template; supported: 32, 64")


def test_launch_dims_refuses_subgroup_48() -> None:
    with pytest.raises(RewriteError, match="subgroup 48 has no template"):
        launch_dims(48, me=1, ne=1, ze=1)


def test_fragment_32_is_refused_with_the_supported_sizes() -> None:
    assert refusal(*naive(), Lowering.F16_OPERANDS, frag=32) == (
        "fragment 32 has no template; supported: 16, 8")


def test_int32_operands_with_f16_operands_lowering_are_refused() -> None:
    assert refusal(*naive("gemm_i32"), Lowering.F16_OPERANDS) == (
        "F16_operands takes f16 or f32 operands, not i32")


def test_f32_operands_with_the_byte_planes_are_refused() -> None:
    assert refusal(*naive(), Lowering.INT32_BYTE_PLANES) == (
        "Int32_byte_planes takes i32 operands, not f32")


F64_ACCUMULATOR = """
from sarek import f64

def wide(a: Global[f32], b: Global[f32], c: Global[f64], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = f64(0.0)
        for p in range(k):
            acc += f64(a[row * k + p]) * f64(b[p * n + col])
        c[row * n + col] = acc
"""


def test_an_accumulator_the_lowering_does_not_use_is_refused() -> None:
    k = build_source(F64_ACCUMULATOR, "wide").ir
    assert refusal(k, recognize(k), Lowering.BF16X3_OPERANDS) == (
        "Bf16x3_operands accumulates in f32; the kernel's accumulator is f64")


BUILTIN_EPILOGUE = """
def scaled(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = f32(0.0)
        for p in range(k):
            acc += a[row * k + p] * b[p * n + col]
        c[row * n + col] = acc * f32(block_dim.x)
"""


def test_an_epilogue_reading_block_dim_is_refused_by_recognition() -> None:
    # block_dim.x differs between the original launch and the rewritten one; recognition
    # already refuses it, before the rewrite is reached.
    with pytest.raises(NotAGemm) as info:
        recognize(build_source(BUILTIN_EPILOGUE, "scaled").ir)
    assert info.value.reason == ("line 9: the stored value block_dim.x uses block_dim.x other "
                                 "than through the global index of a mapping")


@pytest.mark.parametrize("part", ["epilogue", "init"])
def test_a_launch_builtin_in_the_epilogue_or_init_is_refused_by_the_rewrite(part: str) -> None:
    # A description that reads block_dim.x (built by hand: recognition never produces one).
    original_kernel, gemm = naive()
    dim = ir.Cast(x=ir.BuiltinValue(which=Builtin.BLOCK_DIM_X), type=ElemType.F32)
    expr = ir.Binary(op=ir.BinOp.ADD, a=getattr(gemm, part), b=dim, type=ElemType.F32)
    changed = replace(gemm, init=expr) if part == "init" else replace(gemm, epilogue=expr)
    reason = refusal(original_kernel, changed, Lowering.BF16X3_OPERANDS)
    what = "initial value" if part == "init" else "epilogue"
    assert reason == (f"the {what} reads block_dim.x, whose value in the rewritten launch is "
                      "not the original's")


def renamed_launch(name: str) -> Launch:
    """``ir_renamed(name)`` launched on small integers at 70x45x37 (alpha = 2, beta = -1)."""
    args = dict(with_operands(example("gemm_epilogue").make(*SIZE, seed=5),
                              small_integers(6)).args)
    args[name] = args.pop("alpha")
    run = Launch(ir_renamed(name), args, (-(-SIZE[1] // 16), -(-SIZE[0] // 16), 1), (16, 16, 1))
    return replace(run, args={**run.args, name: np.float32(2), "beta": np.float32(-1)})


@pytest.mark.parametrize("name", ["me", "ne", "ze", "d", "t"])
def test_a_parameter_named_like_a_region_value_keeps_its_name(name: str) -> None:
    run = renamed_launch(name)
    done = rewrite_launch(run)
    params = [p.name for p in done.launch.kernel.params]
    assert params[:8] == ["a", "b", "c", "m", "n", "k", name, "beta"]
    assert params[8:] == [f"{x}_" if x == name else x for x in EXTRA_NAMES]
    assert np.array_equal(bits(done.launch.simulate()["c"]), bits(original(run)))


@pytest.mark.parametrize("name", ["sk_row", "sk_acc0_0_0", "sk_b_hi"])
def test_a_parameter_named_like_a_rewrite_internal_is_renamed_with_u(name: str) -> None:
    # A variable, a fragment and a staged array of the rewritten body.
    run = renamed_launch(name)
    done = rewrite_launch(run)
    assert [p.name for p in done.launch.kernel.params][6] == f"u_{name}"
    assert np.array_equal(bits(done.launch.simulate()["c"]), bits(original(run)))


def ir_renamed(name: str) -> ir.Kernel:
    """``gemm_epilogue`` with its ``alpha`` parameter (and its uses) renamed."""
    src = """
def gemm_relu(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32,
              NAME: f32, beta: f32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = f32(0.0)
        for p in range(k):
            acc += a[row * k + p] * b[p * n + col]
        c[row * n + col] = max(NAME * acc + beta * c[row * n + col], 0.0)
"""
    return build_source(src.replace("NAME", name), "gemm_relu").ir

