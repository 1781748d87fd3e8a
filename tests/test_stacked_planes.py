"""The byte planes on ``wgmma`` (``sarek.matrix_scheme.STACKED_PLANES``): the pre-pass splits
int32 operands into their byte planes once, stacked along k by shift class; the GEMM multiplies
them as u8 x u8 + s32 on ``wgmma ... .s32.u8.u8`` in phases shifted 8 bits apart. The
simulator runs the lowered sequence with the bits of NumPy's int64 product modulo 2^32 and of
the original kernel; the temporaries hold exactly the stacked planes; the printed text is the
8-bit ``wgmma`` with K-major descriptors; refusals carry the reason."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from conftest import example
from gemm_gen import GemmSpec, build, geometry
from gemm_gen import launch as spec_args
from hypothesis import given, settings
from hypothesis import strategies as st

import sarek
from backends import registry
from backends.cstyle import EmitError
from backends.cuda import compile_cubin, nvrtc_available, roles, tma
from backends.cuda import lower as cuda_lower
from backends.pipeline import compile_launch, rewrite_steps
from sarek import ir
from sarek.ir_build import var
from sarek.ir_walk import replace_statements
from sarek.launch import Launch, Steps
from sarek.matrix_pattern import recognize
from sarek.matrix_rewrite import RewriteError, kernel, operands_refusal
from sarek.matrix_scheme import PLANE_ALIGN, PLANE_PHASES, Lowering
from sarek.rewrite import prepass
from sarek.schedule import Schedule, ScheduleError

PLANES = Lowering.INT32_BYTE_PLANES
SWIZZLED = Schedule.parse("t128x256k128s4gf")  # 128-byte rows: 128-byte swizzle atoms
CORES = Schedule.parse("t128x256k64s3gf")  # 64-byte rows: core matrices without swizzle
ONE_GROUP = Schedule.parse("t128k128s4gf")  # 128x128 tiles over one warpgroup
PRODUCER = Schedule.parse("t128x256k128s3gw")  # a producer warpgroup of bulk tensor copies
PERSISTENT = Schedule.parse("t128x256k128s3gwr")
CUDA = registry.target("cuda").staging


def modular(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` modulo 2^32 as int32 (NumPy's int64 product, then the low 32 bits)."""
    return ((a.astype(np.int64) @ b.astype(np.int64)) & 0xFFFFFFFF).astype(
        np.uint32).view(np.int32)


def steps_of(launch: Launch, schedule: Schedule) -> Steps:
    return rewrite_steps(launch, lowering=PLANES, subgroup=32, frag=16, staging=CUDA,
                         schedule=schedule)[1]


def planes_of(x: np.ndarray) -> list[np.ndarray]:
    u = x.astype(np.int64) & 0xFFFFFFFF
    return [((u >> (8 * p)) & 255).astype(np.int64) for p in range(4)]


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 5), st.integers(1, 5), st.integers(1, 9), st.integers(0, 2**32 - 1))
def test_the_phases_horner_sum_is_the_product_modulo_2_32(m: int, n: int, k: int,
                                                            seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.integers(-2**31, 2**31, (m, k), dtype=np.int64).astype(np.int32)
    b = rng.integers(-2**31, 2**31, (k, n), dtype=np.int64).astype(np.int32)
    pa, pb = planes_of(a), planes_of(b)
    total = np.zeros((m, n), np.int64)
    for phase in PLANE_PHASES:  # shift class 3 first: ((S3 << 8 + S2) << 8 + S1) << 8 + S0
        total = ((total << 8) + sum(pa[p] @ pb[q] for p, q in phase)) & 0xFFFFFFFF
    assert np.array_equal(total.astype(np.uint32).view(np.int32), modular(a, b))


def test_the_phases_take_the_ten_products_of_the_byte_planes_once_each() -> None:
    pairs = [pair for phase in PLANE_PHASES for pair in phase]
    assert sorted(pairs) == sorted((p, q) for p in range(4) for q in range(4) if p + q <= 3)
    assert [{p + q for p, q in phase} for phase in PLANE_PHASES] == [{3}, {2}, {1}, {0}]


@pytest.mark.parametrize("schedule", [SWIZZLED, CORES, ONE_GROUP], ids=lambda s: s.name)
@pytest.mark.parametrize("size", [(150, 300, 70), (70, 45, 33), (130, 260, 129)])
def test_the_sequence_on_cuda_gives_numpys_product_modulo_2_32(
        schedule: Schedule, size: tuple[int, int, int]) -> None:
    m, n, k = size
    launch = example("gemm_i32").make(m, n, k, seed=7)
    steps = steps_of(launch, schedule)
    assert [s.kernel.name.endswith(schedule.name) for s in steps.launches] == [False, True]
    out = steps.simulate(target="cuda")["c"]
    a, b = launch.args["a"].reshape(m, k), launch.args["b"].reshape(k, n)
    assert np.array_equal(out, modular(a, b).ravel())


def test_the_sequence_wraps_on_the_extremes_of_int32() -> None:
    m, n, k = 40, 70, 50
    launch = example("gemm_i32").make(m, n, k, seed=3)
    rng = np.random.default_rng(4)
    extremes = np.array([-2**31, 2**31 - 1, -1, 0, 1, 255, 256, -256], np.int32)
    a, b = (rng.choice(extremes, size).astype(np.int32) for size in (m * k, k * n))
    launch = replace(launch, args={**launch.args, "a": a, "b": b})
    out = steps_of(launch, SWIZZLED).simulate(target="cuda")["c"]
    assert np.array_equal(out, modular(a.reshape(m, k), b.reshape(k, n)).ravel())


BASE = GemmSpec(m=70, n=45, k=33, block=(16, 16, 1))


@pytest.mark.parametrize("spec", [
    replace(BASE, batch=True, batches=2),  # A and B of two batches: a layer each
    replace(BASE, a_major="col", b_major="col"),  # A along its columns, B along its rows
    replace(BASE, pads=(3, 2, 1), offsets=(1, 2, 3), k_start=1),  # strides, offsets, k_start
    replace(BASE, init="c_old", epilogue="alpha_beta"),  # C's old value, then alpha and beta
    replace(BASE, mapping="1d-col", block=(64, 1, 1)),  # a column-major 1-D mapping
    replace(BASE, init="bias", epilogue="clamp", c_major="col"),
], ids=["batched", "col-major", "strided", "c-old", "1d-col", "bias-clamp"])
def test_the_sequence_gives_the_originals_bits_on_every_access_it_recognizes(
        spec: GemmSpec) -> None:
    grid, block = geometry(spec)
    launch = Launch(build(spec).ir, spec_args(spec, seed=2), grid, block)
    want = launch.simulate()
    steps = steps_of(launch, SWIZZLED)
    for target in (None, "cuda"):  # the neutral kernels and CUDA's lowered ones
        got = steps.simulate(target=target)
        assert all(np.array_equal(got[name], want[name]) for name in want), target


def test_the_temporaries_hold_the_stacked_planes_zero_past_the_depth() -> None:
    m, n, k = 20, 30, 37
    launch = example("gemm_i32").make(m, n, k, seed=9)
    steps = steps_of(launch, SWIZZLED)
    first = steps.launches[0]
    a_name, b_name = (s.name for s in steps.scratch)
    dp = -(-k // PLANE_ALIGN) * PLANE_ALIGN
    args = {**first.args, a_name: np.zeros(m * 10 * dp, np.uint8),
            b_name: np.zeros(n * 10 * dp, np.uint8)}
    out = sarek.simulate(first.kernel, args, grid=first.grid, block=first.block)
    a, b = launch.args["a"].reshape(m, k), launch.args["b"].reshape(k, n)
    pa, pb = planes_of(a), planes_of(b.T)
    got_a, got_b = out[a_name].reshape(m, 10, dp), out[b_name].reshape(n, 10, dp)
    for block, (p, q) in enumerate(pair for phase in PLANE_PHASES for pair in phase):
        assert np.array_equal(got_a[:, block, :k], pa[p]), block
        assert np.array_equal(got_b[:, block, :k], pb[q]), block
    assert not got_a[:, :, k:].any() and not got_b[:, :, k:].any()


def test_the_printed_gemm_is_the_8_bit_wgmma_reading_swizzled_k_major_operands() -> None:
    launch = example("gemm_i32").make(256, 512, 256)
    compiled = compile_launch(registry.target("cuda"), launch, lowering=PLANES,
                              schedule=SWIZZLED)
    text = compiled.text
    assert "wgmma.mma_async.sync.aligned.m64n256k32.s32.u8.u8" in text
    assert "ldmatrix" not in text  # A and B both through descriptors
    assert text.count("1024u, 1ull)") == 2 * 4  # A and B, 4 sub-steps: SBO 1024, 128B swizzle
    assert "wgmma.wait_group.sync.aligned 1" in text  # a step's group left in flight
    assert [s.launch.kernel.name for s in compiled.before] == ["matmul_i32_to_planes"]


@pytest.mark.skipif(nvrtc_available() is not None, reason=f"NVRTC: {nvrtc_available()}")
@pytest.mark.parametrize("schedule", [SWIZZLED, CORES, PRODUCER, PERSISTENT],
                         ids=lambda s: s.name)
def test_nvrtc_compiles_the_pre_pass_and_the_8_bit_wgmma_gemm(schedule: Schedule) -> None:
    launch = example("gemm_i32").make(256, 512, 256)
    compiled = compile_launch(registry.target("cuda"), launch, lowering=PLANES,
                              schedule=schedule)
    for text in (compiled.before[0].text, compiled.text):
        assert compile_cubin(text, "sm_90")


def test_the_pre_pass_splits_int32_operands_under_warpgroup_schedules_only() -> None:
    launch = example("gemm_i32").make(64, 64, 64)
    gemm = recognize(launch.kernel)
    assert prepass.applies(gemm, PLANES, SWIZZLED, CUDA)
    assert not prepass.applies(gemm, PLANES, Schedule.parse("t64k32p"), CUDA)
    assert not prepass.applies(gemm, PLANES, SWIZZLED, replace(CUDA, whole_int32=True))


def test_the_stacked_planes_are_refused_under_bulk_copies_without_a_producer() -> None:
    gemm = recognize(example("gemm_i32").make(64, 64, 64).kernel)
    stacked = prepass.stacked_gemm(gemm, ("a_u8", "b_u8"),
                                   {n: var(f"sk_{n}") for n in ("me", "ne", "d")})
    why = operands_refusal(stacked, PLANES, Schedule.parse("t128x256k128s4gb"), CUDA)
    assert why is not None and "cp.async" in why


def test_128_deep_steps_are_the_stacked_planes_alone() -> None:
    gemm = recognize(example("gemm_f16").make(64, 64, 64).kernel)
    why = operands_refusal(gemm, Lowering.F16_OPERANDS, Schedule.parse("t128x256k128s3gf"),
                           CUDA)
    assert why is not None and "128-deep steps" in why
    with pytest.raises(ScheduleError, match="16, 32, 48 or 64"):
        Schedule.parse("t128k128s3").check(16, 256)


def test_stacked_planes_under_another_lowering_are_refused() -> None:
    launch = example("gemm_i32").make(64, 64, 64)
    gemm = recognize(launch.kernel)
    stacked = replace(gemm, stacked_planes=True)
    with pytest.raises(RewriteError, match="Int32_byte_planes"):
        kernel(launch.kernel, stacked, Lowering.INT8_OPERANDS, staging=CUDA, schedule=SWIZZLED)


# A producer warpgroup (``backends.cuda.roles``): both roles go through the phases, the steps
# counted on across them; each phase's tiles come through tensor maps of its own.

def lowered_gemm(launch: Launch, schedule: Schedule) -> tuple[Launch, dict[str, np.ndarray]]:
    """The GEMM launch of the sequence under ``schedule``, its kernel lowered for CUDA, and
    its arguments with the temporaries the pre-pass wrote."""
    steps = steps_of(launch, schedule)
    first, last = steps.launches
    names = [s.name for s in steps.scratch]
    m, n, k = (int(first.args[x]) for x in ("m", "n", "k"))
    dp = -(-k // PLANE_ALIGN) * PLANE_ALIGN
    planes = sarek.simulate(first.kernel, {**first.args, names[0]: np.zeros(m * 10 * dp, np.uint8),
                                           names[1]: np.zeros(n * 10 * dp, np.uint8)},
                            grid=first.grid, block=first.block)
    args = {**last.args, **{name: planes[name] for name in names}}
    return replace(last, kernel=cuda_lower.lower(last.kernel)), args


@pytest.mark.parametrize("schedule", [PRODUCER, Schedule.parse("t128x256k128s3gfw"),
                                      PERSISTENT], ids=lambda s: s.name)
@pytest.mark.parametrize("size", [(150, 300, 70), (130, 260, 129)])
def test_a_producer_warpgroup_gives_numpys_product_modulo_2_32(
        schedule: Schedule, size: tuple[int, int, int]) -> None:
    # k = 70: each phase's blocks end inside a 128-deep step (the map's zero fill past them)
    m, n, k = size
    launch = example("gemm_i32").make(m, n, k, seed=5)
    out = steps_of(launch, schedule).simulate(target="cuda")["c"]
    a, b = launch.args["a"].reshape(m, k), launch.args["b"].reshape(k, n)
    assert np.array_equal(out, modular(a, b).ravel())


@pytest.mark.parametrize("schedule", [PERSISTENT, Schedule.parse("t128x256k128s3gfwr")],
                         ids=lambda s: s.name)
def test_one_persistent_block_carries_the_ring_through_every_phase_and_tile(
        schedule: Schedule) -> None:
    m, n, k = 150, 300, 70  # four tiles of four phases of one or three steps
    launch = example("gemm_i32").make(m, n, k, seed=6)
    gemm, args = lowered_gemm(launch, schedule)
    out = sarek.simulate(gemm.kernel, args, grid=(1, 1, 1), block=gemm.block)["c"]
    a, b = launch.args["a"].reshape(m, k), launch.args["b"].reshape(k, n)
    assert np.array_equal(out, modular(a, b).ravel())


def test_each_phase_copies_through_tensor_maps_of_its_own() -> None:
    launch = example("gemm_i32").make(150, 300, 70)
    gemm, args = lowered_gemm(launch, PRODUCER)
    dp = -(-70 // PLANE_ALIGN) * PLANE_ALIGN
    found = tma.requests(gemm.kernel, args)
    blocks = [len(phase) for phase in PLANE_PHASES]
    firsts = [sum(blocks[:i]) for i in range(len(blocks))]
    for operand, rows in (("a_u8", 150), ("b_u8", 300)):
        param = [p.name for p in gemm.kernel.params].index(operand)
        mine = [r for r in found if r.param == param]
        assert [(r.origin, r.cols) for r in mine] == [(f * dp, b * dp)
                                                     for f, b in zip(firsts, blocks, strict=True)]
        assert all(r.usable and r.rows == rows and r.stride == 10 * dp and r.box_cols == 128
                   for r in mine)


def test_a_producer_that_does_not_wait_for_the_consumers_races_across_the_phases() -> None:
    launch = example("gemm_i32").make(128, 256, 300)  # one tile, steps in every phase
    gemm, args = lowered_gemm(launch, PRODUCER)

    def gone(s: ir.Stmt) -> list[ir.Stmt] | None:
        return [] if isinstance(s, ir.MbarrierWait) and s.barriers == roles.EMPTY else None

    kernel = gemm.kernel.model_copy(update={"body": replace_statements(gemm.kernel.body, gone)})
    with pytest.raises(sarek.SharedRace):
        sarek.simulate(kernel, args, grid=gemm.grid, block=gemm.block)


@pytest.mark.parametrize("spec", [
    replace(BASE, a_major="col", b_major="col"),
    replace(BASE, pads=(3, 2, 1), offsets=(1, 2, 3), k_start=1),
    replace(BASE, init="c_old", epilogue="alpha_beta"),
    replace(BASE, mapping="1d-col", block=(64, 1, 1)),
], ids=["col-major", "strided", "c-old", "1d-col"])
def test_a_producer_warpgroup_gives_the_originals_bits_on_the_accesses_it_maps(
        spec: GemmSpec) -> None:
    grid, block = geometry(spec)
    launch = Launch(build(spec).ir, spec_args(spec, seed=2), grid, block)
    want = launch.simulate()
    got = steps_of(launch, PRODUCER).simulate(target="cuda")
    assert all(np.array_equal(got[name], want[name]) for name in want)


def test_cudas_policy_takes_the_producer_warpgroup_and_gf_where_no_map_serves() -> None:
    assert CUDA.candidates(PLANES.value, 4096, 4096)[:2] == (
        PRODUCER, Schedule.parse("t128x256k128s3gf"))
    spec = replace(BASE, m=1024, n=1024, k=16, batch=True, batches=2)
    grid, block = geometry(spec)
    launch = Launch(build(spec).ir, spec_args(spec, seed=2), grid, block)
    with pytest.raises(EmitError, match="a batched operand's moves with its layer"):
        cuda_lower.lower(steps_of(launch, PRODUCER).launches[-1].kernel)
    compiled = compile_launch(registry.target("cuda"), launch)
    assert compiled.rewritten is not None
    assert compiled.rewritten.schedule == Schedule.parse("t128x256k128s3gf")
