"""Warpgroup schedules and their CUDA lowering onto ``wgmma`` (``specs/matrix-pattern-rewrite.md``
6.2, ``specs/backends.md``): the neutral rewrite keeps the seed's promise, the lowered kernel
is bit for bit the seed's under the ``h200`` model, and what the lowering cannot place is
refused with the reason."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import example
from test_matrix_rewrite import bits, original, small_integers, with_operands

import sarek
from backends.cstyle import EmitError
from backends.cuda import compile_cubin, nvrtc_available
from backends.cuda import lower as cuda_lower
from backends.cuda.shared import dynamic_bytes
from backends.cuda.wgmma import CoreLayout, fence_and_wait
from backends.registry import target
from sarek import ir, ir_check
from sarek.ir_build import add, const, mul, var
from sarek.ir_walk import replace_statements, walk
from sarek.launch import Launch
from sarek.matrix_rewrite import RewriteError, rewrite_launch
from sarek.matrix_scheme import Lowering
from sarek.schedule import Schedule, ScheduleError
from sarek.staging import Fragments, Staging

WARPGROUP = [Schedule(tile=128, step=64, stages=2, warpgroup=True),
             Schedule(tile=128, step=32, stages=3, warpgroup=True)]
WIDE = [Schedule(tile=128, step=64, stages=3, wide=True, warpgroup=True),
        Schedule(tile=128, step=64, stages=2, wide=True, warpgroup=True)]
"""128x256 over two warpgroups: each wave one 16x256 strip, m64n256k16 per warpgroup."""
SIZE = (150, 133, 70)  # ragged tiles each way, a partial last step


def rewrite(schedule: Schedule, seed: int = 5) -> Launch:
    launch = example("gemm_f16").make(*SIZE, seed=seed)
    return rewrite_launch(launch, staging=target("cuda").staging, schedule=schedule).launch


def seed_bits(seed: int = 5) -> np.ndarray:
    launch = example("gemm_f16").make(*SIZE, seed=seed)
    rw = rewrite_launch(launch, staging=target("cuda").staging,
                        schedule=Schedule()).launch
    out = sarek.simulate(rw.kernel, dict(rw.args), grid=rw.grid, block=rw.block,
                         target="cuda", arith="h200")
    return bits(out["c"])


def test_warpgroup_schedules_are_named_with_a_g_and_parse_back() -> None:
    assert [s.name for s in WARPGROUP + WIDE] == ["t128k64s2g", "t128k32s3g",
                                                  "t128x256k64s3g", "t128x256k64s2g"]
    assert all(Schedule.parse(s.name) == s for s in WARPGROUP + WIDE)
    assert [s.groups for s in WARPGROUP + WIDE] == [1, 1, 2, 2]


@pytest.mark.parametrize(("schedule", "threads", "why"), [
    (Schedule(step=64, stages=2, warpgroup=True), 128, "128x128 tiles over one warpgroup"),
    (Schedule(tile=128, step=64, warpgroup=True), 128, "2 to 4 stages"),
    (Schedule(step=64, stages=2, wide=True, warpgroup=True), 256, "128x256 over two"),
    (WIDE[0], 128, "128x256 over two"),
], ids=["tile-64", "one-stage", "wide-tile-64", "wide-one-warpgroup"])
def test_a_warpgroup_schedule_needs_128_row_tiles_whole_warpgroups_and_stages(
        schedule: Schedule, threads: int, why: str) -> None:
    with pytest.raises(ScheduleError, match=why):
        schedule.check(16, threads)


@pytest.mark.parametrize("schedule", WIDE, ids=lambda s: s.name)
def test_a_128x256_warpgroup_schedule_runs_two_warpgroups(schedule: Schedule) -> None:
    schedule.check(16, 256)
    assert (schedule.waves, schedule.tile_n) == (8, 256)


def test_a_warpgroup_schedule_refuses_operands_it_cannot_multiply_from_shared_b() -> None:
    for name, lowering in (("gemm_f32", Lowering.F16_OPERANDS),
                           ("gemm_f32", Lowering.BF16X3_OPERANDS)):
        with pytest.raises(RewriteError, match="one 16-bit term with B staged as it is"):
            rewrite_launch(example(name).make(*SIZE), lowering=lowering,
                           schedule=WARPGROUP[0])


@pytest.mark.parametrize("schedule", WARPGROUP + WIDE, ids=lambda s: s.name)
def test_the_neutral_warpgroup_rewrite_gives_the_originals_bits(schedule: Schedule) -> None:
    launch = with_operands(example("gemm_f16").make(*SIZE, seed=3), small_integers(4))
    rw = rewrite_launch(launch, staging=target("cuda").staging, schedule=schedule).launch
    assert np.array_equal(bits(rw.simulate()["c"]), bits(original(launch)))


@pytest.mark.parametrize("schedule", WARPGROUP, ids=lambda s: s.name)
def test_each_wave_holds_two_16x128_accumulators_and_the_block_one_b_per_sub_step(
        schedule: Schedule) -> None:
    decls = [s for s in walk(rewrite(schedule).kernel.body) if isinstance(s, ir.FragDecl)]
    shapes = {(s.shape.m, s.shape.n, s.shape.k) for s in decls}
    assert shapes == {(16, 128, 16)}
    uses = [s.use for s in decls]
    subs = schedule.step // 16
    assert (uses.count(ir.FragUse.ACCUMULATOR), uses.count(ir.FragUse.A),
            uses.count(ir.FragUse.B)) == (2, 2 * subs, subs)


@pytest.mark.parametrize("schedule", WIDE, ids=lambda s: s.name)
def test_each_wave_of_a_128x256_block_holds_one_16x256_accumulator(schedule: Schedule) -> None:
    decls = [s for s in walk(rewrite(schedule).kernel.body) if isinstance(s, ir.FragDecl)]
    assert {(s.shape.m, s.shape.n, s.shape.k) for s in decls} == {(16, 256, 16)}
    uses = [s.use for s in decls]
    subs = schedule.step // 16
    assert (uses.count(ir.FragUse.ACCUMULATOR), uses.count(ir.FragUse.A),
            uses.count(ir.FragUse.B)) == (1, subs, subs)


@pytest.mark.parametrize("schedule", WIDE, ids=lambda s: s.name)
def test_the_two_warpgroups_take_turns_through_an_exchange_array_of_four_strips(
        schedule: Schedule) -> None:
    # one 16x256 f32 strip for each wave of a warpgroup (rows 256 + 8 apart, CUDA's padding):
    # 66 KiB, not the 132 KiB of eight, which with three 64-deep stages would not fit the
    # 227 KiB a block may have
    kernel = rewrite(schedule).kernel
    exchange = next(s for s in walk(kernel.body)
                    if isinstance(s, ir.ArrayDecl) and s.name == "sk_cs")
    assert exchange.size == 4 * 16 * 264
    turns = [s for s in kernel.body if isinstance(s, ir.If)
             and any(isinstance(x, ir.FragStore) for x in s.then)]
    assert len(turns) == 2
    assert dynamic_bytes(cuda_lower.lower(kernel)) <= 227 * 1024


def varying_init() -> Launch:
    """An f16 GEMM whose initial value is C's f32 (it enters through the exchange array)."""
    from gemm_gen import varying_init_launch

    return varying_init_launch(130, 300, 70)


def test_a_varying_initial_value_enters_each_warpgroup_in_its_turn_with_the_seeds_bits() -> None:
    launch = varying_init()

    def run(schedule: Schedule) -> np.ndarray:
        rw = rewrite_launch(launch, staging=target("cuda").staging, schedule=schedule).launch
        out = sarek.simulate(rw.kernel, dict(rw.args), grid=rw.grid, block=rw.block,
                             target="cuda", arith="h200")
        return bits(out["c"])

    assert np.array_equal(run(WIDE[0]), run(Schedule()))


def test_without_the_barrier_between_the_turns_the_simulator_reports_a_race() -> None:
    from sarek.errors import SharedRace

    rw = rewrite(WIDE[0])
    body = rw.kernel.body
    first = next(i for i, s in enumerate(body) if isinstance(s, ir.If)
                 and any(isinstance(x, ir.FragStore) for x in s.then))
    assert isinstance(body[first + 3], ir.Barrier)  # put, barrier, take, barrier
    broken = rw.kernel.model_copy(update={"body": body[:first + 3] + body[first + 4:]})
    with pytest.raises(SharedRace, match="sk_cs"):
        sarek.simulate(broken, dict(rw.args), grid=rw.grid, block=rw.block)


def test_the_staging_policy_shapes_each_waves_accumulators() -> None:
    # A square grid of fragments over a 32x32 wave tile unless the schedule asks for strips;
    # CUDA's strips are wgmma's 64 rows over its 4 warps high, a policy naming none one
    # fragment high, and the 128-row tile takes two per wave of the four.
    assert Staging().fragments(Schedule(), 16) == Fragments(rows=2, cols=2, m=16, n=16)
    assert Staging().fragments(Schedule(), 8) == Fragments(rows=4, cols=4, m=8, n=8)
    strips = Fragments(rows=2, cols=1, m=16, n=128, shared_b=True)
    assert target("cuda").staging.fragments(WARPGROUP[0], 16) == strips
    assert Staging().fragments(WARPGROUP[1], 16) == strips
    # 128x256 over eight waves: one strip 256 wide each, waves 4-7 below waves 0-3
    wide = Fragments(rows=1, cols=1, m=16, n=256, shared_b=True)
    assert target("cuda").staging.fragments(WIDE[0], 16) == wide


@pytest.mark.parametrize("schedule", WARPGROUP + WIDE, ids=lambda s: s.name)
def test_the_cuda_lowering_is_the_seeds_bits_under_h200(schedule: Schedule) -> None:
    rw = rewrite(schedule)
    out = sarek.simulate(rw.kernel, dict(rw.args), grid=rw.grid, block=rw.block,
                         target="cuda", arith="h200")
    assert np.array_equal(bits(out["c"]), seed_bits())


def test_each_fragment_multiply_add_is_one_wgmma_and_each_run_ends_in_one_wait() -> None:
    schedule = WARPGROUP[1]
    lowered = cuda_lower.lower(rewrite(schedule).kernel)
    stmts = list(walk(lowered.body))
    wgmmas = [s for s in stmts if isinstance(s, ir.Wgmma)]
    assert len(wgmmas) == 2 * schedule.step // 16
    assert {(s.n, s.core_k, s.core_n) for s in wgmmas} == {(128, 64, 8 * schedule.step)}
    assert sum(isinstance(s, ir.WgmmaWait) for s in stmts) == 1
    waits = [i for i, s in enumerate(stmts) if isinstance(s, ir.StageWait)]
    assert all(isinstance(stmts[i + 1], ir.AsyncProxyFence) for i in waits)
    assert not any(isinstance(s, ir.Mma) for s in stmts)


def test_each_warpgroup_of_a_128x256_block_issues_one_m64n256k16_a_sub_step() -> None:
    schedule = WIDE[0]
    stmts = list(walk(cuda_lower.lower(rewrite(schedule).kernel).body))
    wgmmas = [s for s in stmts if isinstance(s, ir.Wgmma)]
    assert len(wgmmas) == schedule.step // 16
    # B 64 x 256 (+8) halves a buffer (33 KiB): four swizzle atoms along n, 8 along k each;
    # A 128 x 64 (+8): K-major from shared memory, no ldmatrix
    assert {(s.n, s.core_k, s.core_n, s.swizzle, s.a_index is not None) for s in wgmmas} == {
        (256, 512, 4096, 128, True)}
    assert {(s.b_descriptor, s.a_descriptor) for s in wgmmas} == {(
        ir.MatrixDescriptor(leading_bytes=8192, stride_bytes=1024, mode=1),
        ir.MatrixDescriptor(leading_bytes=16, stride_bytes=1024, mode=1))}
    assert not any(isinstance(s, ir.Ldmatrix | ir.Mma) for s in stmts)
    accumulators = [s for s in stmts if isinstance(s, ir.ArrayDecl)
                    and s.space is ir.MemSpace.LOCAL and s.name.startswith("sk_acc")]
    assert [s.size for s in accumulators] == [128]  # f32 registers per lane


@pytest.mark.skipif(nvrtc_available() is not None, reason=f"NVRTC: {nvrtc_available()}")
def test_the_printed_m64n256k16_compiles_for_sm_90a() -> None:
    src = sarek.emit(rewrite(WIDE[0]).kernel, "cuda")
    assert "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {%0, %1," in src
    assert '"+f"(sk_acc0_0_0[127])' in src and "%128, %129, p, 1, 1, 0, 1;" in src
    assert compile_cubin(src, "sm_90")[:4] == b"\x7fELF"


def test_a_kernel_with_wgmma_reads_its_subgroup_index_once_the_same_in_every_lane() -> None:
    src = sarek.emit(rewrite(WIDE[0]).kernel, "cuda")
    body = src[src.index(") {\n", src.index('extern "C" __global__')) + 4:]
    assert body.startswith("    const int sk_subgroup = __shfl_sync(0xffffffffu, ")
    assert body.count(">> 5") == 1 and "int sk_wave = sk_subgroup;" in body
    seed = sarek.emit(rewrite(Schedule()).kernel, "cuda")  # mma.sync: no warpgroups to assume
    assert "sk_subgroup" not in seed and "__shfl_sync" not in seed


def test_the_lowering_refuses_a_wgmma_block_that_is_not_whole_warpgroups() -> None:
    kernel = rewrite(WIDE[0]).kernel.model_copy(update={"block": (192, 1, 1)})
    with pytest.raises(EmitError, match="not a multiple of 128 invocations"):
        cuda_lower.lower(kernel)


@pytest.mark.skipif(nvrtc_available() is not None, reason=f"NVRTC: {nvrtc_available()}")
def test_the_printed_wgmma_compiles_for_sm_90a() -> None:
    src = sarek.emit(rewrite(WARPGROUP[0]).kernel, "cuda")
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16" in src
    assert "fence.proxy.async.shared::cta" in src
    assert compile_cubin(src, "sm_90")[:4] == b"\x7fELF"


def test_a_core_layout_keeps_every_8_element_chunk_of_a_row_whole() -> None:
    layout = CoreLayout(rows=32, pitch=136)
    at = {(k, c): _value(layout.element(const(0), const(k), const(c)))
          for k in range(32) for c in range(128)}
    assert sorted(at.values()) == list(range(32 * 128))  # one place each, dense
    assert all(at[k, c + 1] == at[k, c] + 1 for k in range(32) for c in range(127) if c % 8 < 7)
    assert all(_value(layout.start(const(s * 32 * 136 + k * 136))) == s * 32 * 136 + 8 * k
               for s in range(3) for k in (0, 16))


def _value(e: ir.Expr) -> int:
    match e:
        case ir.Const(value=v):
            return int(v)
        case ir.Binary(op=op, a=a, b=b):
            x, y = _value(a), _value(b)
            match op:
                case ir.BinOp.ADD:
                    return x + y
                case ir.BinOp.SUB:
                    return x - y
                case ir.BinOp.MUL:
                    return x * y
                case ir.BinOp.DIV:
                    return x // y
                case ir.BinOp.REM:
                    return x % y
                case ir.BinOp.XOR:
                    return x ^ y
                case ir.BinOp.AND:
                    return x & y
                case ir.BinOp.SHR:
                    return x >> y
    raise AssertionError(e)


def test_a_run_that_reloads_a_register_a_wgmma_reads_is_refused() -> None:
    issue = ir.Wgmma(elem=ir.ElemType.F16, n=128, d="acc", a="fa", b="sb", b_index=var("i"),
                     core_k=64, core_n=256)
    reload = ir.Ldmatrix(dst="fa", offset=0, src="sa", address=var("j"), count=4)
    with pytest.raises(EmitError, match="reloads 'fa' while a wgmma still reads it"):
        fence_and_wait((issue, reload))
    assert fence_and_wait((issue,))[-1] == ir.WgmmaWait()


def test_metal_and_opencl_with_inline_ptx_refuse_the_warpgroup_kernel() -> None:
    kernel = rewrite(WARPGROUP[0]).kernel
    with pytest.raises(EmitError, match="16x128; Metal's simdgroup matrices are 8x8"):
        sarek.emit(kernel, "metal")
    with pytest.raises(EmitError, match=r"opencl-nv has no (wgmma|wgmma_wait|async_proxy_fence) "
                       "statement: wgmma is an sm_90a warpgroup instruction"):
        sarek.emit(kernel, "opencl-nv")


def test_the_simulator_runs_a_wgmma_only_for_whole_warpgroups() -> None:
    from sarek.errors import LaunchError

    rw = rewrite(WARPGROUP[0])
    lowered = cuda_lower.lower(rw.kernel).model_copy(update={"block": None})
    with pytest.raises(LaunchError, match="whole warpgroups of 128 invocations"):
        sarek.simulate(lowered, dict(rw.args), grid=rw.grid, block=(64, 1, 1))


def test_b_buffers_of_whole_kilobytes_take_128_byte_swizzle_atoms() -> None:
    by_name = {}
    for schedule in WARPGROUP:
        lowered = cuda_lower.lower(rewrite(schedule).kernel)
        by_name[schedule.name] = {s.swizzle for s in walk(lowered.body)
                                  if isinstance(s, ir.Wgmma)}
    # B buffers of 64 x 128 halves (unpadded: 64-deep steps) are 16 KiB; of 32 x 136, 8.5 KiB
    assert by_name == {"t128k64s2g": {128}, "t128k32s3g": {0}}


def test_cuda_stages_the_16_bit_rows_of_64_deep_warpgroup_steps_unpadded() -> None:
    sizes = {}
    for schedule in [*WARPGROUP, WIDE[0]]:
        stmts = walk(rewrite(schedule).kernel.body)
        sizes[schedule.name] = {s.name: s.size for s in stmts if isinstance(s, ir.ArrayDecl)
                                and s.name in ("sk_a", "sk_b")}
    # swizzle atoms take 64 columns a row; 32-deep steps keep ldmatrix's padded rows (+8)
    assert sizes == {"t128k64s2g": {"sk_a": 2 * 128 * 64, "sk_b": 2 * 64 * 128},
                     "t128k32s3g": {"sk_a": 3 * 128 * 40, "sk_b": 3 * 32 * 136},
                     "t128x256k64s3g": {"sk_a": 3 * 128 * 64, "sk_b": 3 * 64 * 256}}
    # a policy that names no swizzled depth pads them as it pads every 16-bit row
    padding = dataclasses.replace(target("cuda").staging, swizzled_depth=0)
    launch = example("gemm_f16").make(*SIZE, seed=5)
    body = rewrite_launch(launch, staging=padding, schedule=WARPGROUP[0]).launch.kernel.body
    assert {s.name: s.size for s in walk(body) if isinstance(s, ir.ArrayDecl)
            and s.name in ("sk_a", "sk_b")} == {"sk_a": 2 * 128 * 72, "sk_b": 2 * 64 * 136}


def test_a_swizzled_layout_is_dense_keeps_chunks_whole_and_xors_them_by_row() -> None:
    layout = CoreLayout(rows=64, pitch=136, swizzle=True)
    at = {(k, c): _value(layout.element(const(0), const(k), const(c)))
          for k in range(64) for c in range(128)}
    assert sorted(at.values()) == list(range(64 * 128))
    assert all(at[k, c + 1] == at[k, c] + 1 for k in range(64) for c in range(127) if c % 8 < 7)
    assert [at[3, 8 * j] // 8 % 8 for j in range(8)] == [j ^ 3 for j in range(8)]
    assert _value(layout.start(const(64 * 136 + 16 * 136))) == 64 * 136 + 16 * 64


def test_a_staged_64_columns_wide_is_read_from_shared_memory_k_major_and_swizzled() -> None:
    reads = {}
    for schedule in WARPGROUP:
        stmts = list(walk(cuda_lower.lower(rewrite(schedule).kernel).body))
        reads[schedule.name] = ({s.a_index is not None for s in stmts if isinstance(s, ir.Wgmma)},
                                sum(isinstance(s, ir.Ldmatrix) for s in stmts))
    # t128k64s2g stages A 128 x 64 (16 KiB buffers): no ldmatrix; t128k32s3g's 32 columns are
    # half an atom, so its A goes through registers
    assert reads == {"t128k64s2g": ({True}, 0), "t128k32s3g": ({False}, 2 * 32 // 16)}


def test_where_a_copy_puts_an_a_element_is_where_wgmma_reads_it() -> None:
    layout = CoreLayout(rows=128, pitch=72, swizzle=True, cols=64)
    for r in range(128):
        for c in range(64):
            logical = _value(layout.logical(const(2 * 128 * 72 + r * 72 + c)))
            assert logical == 2 * 128 * 72 + r * 64 + c
            placed = _value(layout.element(const(2 * 128 * 72), const(r), const(c)))
            assert placed == logical ^ (((logical - 2 * 128 * 72) >> 6 & 7) << 3)


def test_an_unpadded_a_is_read_where_the_neutral_rewrite_put_it() -> None:
    # rows of 64: the index wgmma's descriptor takes is the neutral offset itself, with no
    # division or remainder left for a compiler to evaluate at each step
    layout = CoreLayout(rows=128, pitch=64, swizzle=True, cols=64)
    offset = add(mul(var("sk_slot"), const(128 * 64)), mul(var("sk_wave"), const(16 * 64)))
    assert layout.logical(offset) == offset
    base = 2 * 128 * 64  # and a copy puts each element where wgmma's swizzle reads it
    for r in range(128):
        for c in range(64):
            logical = _value(layout.logical(const(base + r * 64 + c)))
            placed = _value(layout.element(const(base), const(r), const(c)))
            assert placed == logical ^ ((((logical - base) >> 6) & 7) << 3)


def _shared_a_kernel(change) -> tuple[ir.Kernel, Launch]:
    rw = rewrite(WARPGROUP[0])
    lowered = cuda_lower.lower(rw.kernel)

    def edit(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        return tuple(change(s) if isinstance(s, ir.Wgmma) and s.a_index is not None else s
                     for s in body)

    from sarek.ir_walk import map_blocks
    return lowered.model_copy(update={"body": map_blocks(lowered.body, edit)}), rw


def test_the_simulator_refuses_an_a_that_is_not_one_for_the_warpgroup() -> None:
    from sarek.errors import SubgroupDivergence

    warp = ir.Binary(op=ir.BinOp.REM, a=ir.BuiltinValue(which=ir.Builtin.SUBGROUP_ID),
                     b=const(4), type=ir.ElemType.I32)
    per_warp = ir.Binary(op=ir.BinOp.MUL, a=warp, b=const(1024), type=ir.ElemType.I32)
    kernel, rw = _shared_a_kernel(lambda s: s.model_copy(update={
        "a_index": ir.Binary(op=ir.BinOp.ADD, a=s.a_index, b=per_warp, type=ir.ElemType.I32)}))
    with pytest.raises(SubgroupDivergence, match="wgmma's A is one for the warpgroup"):
        sarek.simulate(kernel, dict(rw.args), grid=rw.grid, block=rw.block, arith="h200")


def test_the_simulator_refuses_an_a_whose_columns_cross_a_128_byte_row() -> None:
    from sarek.errors import OutOfBounds

    kernel, rw = _shared_a_kernel(lambda s: s.model_copy(update={
        "a_index": ir.Binary(op=ir.BinOp.ADD, a=s.a_index, b=const(56),
                             type=ir.ElemType.I32)}))
    with pytest.raises(OutOfBounds, match="cross a 128-byte row"):
        sarek.simulate(kernel, dict(rw.args), grid=rw.grid, block=rw.block, arith="h200")


def test_the_checker_refuses_a_shared_a_that_is_not_a_shared_array_of_the_operands() -> None:
    kernel, _ = _shared_a_kernel(lambda s: s.model_copy(update={"a": s.d}))
    problems = ir_check.check(kernel)
    assert any("wgmma reads A from a shared array of f16" in p.reason for p in problems)


@pytest.mark.skipif(nvrtc_available() is not None, reason=f"NVRTC: {nvrtc_available()}")
def test_the_printed_wgmma_with_a_from_shared_memory_compiles_for_sm_90a() -> None:
    src = sarek.emit(rewrite(WARPGROUP[0]).kernel, "cuda")
    assert "ldmatrix" not in src
    assert "16u, 1024u, 1ull)" in src  # A's descriptor: K-major, 8 rows of 128 bytes apart
    assert "p, 1, 1, 0, 1;" in src
    assert compile_cubin(src, "sm_90")[:4] == b"\x7fELF"


@pytest.mark.skipif(nvrtc_available() is not None, reason=f"NVRTC: {nvrtc_available()}")
def test_a_wgmma_kernel_compiled_for_an_older_gpu_is_refused_with_the_reason() -> None:
    from backends.cuda import NvrtcError

    src = sarek.emit(rewrite(WARPGROUP[0]).kernel, "cuda")
    with pytest.raises(NvrtcError, match=r"wgmma .* which only sm_90a has, not sm_80"):
        compile_cubin(src, "sm_80")


@pytest.mark.parametrize(("schedule", "b", "a"), [
    # 64 k-rows of 128 (+8) halves: 128-byte swizzle atoms of 8 k-rows x 64 columns (1024 B);
    # leading = between atoms along n (8 atoms along k each: 8 KiB), stride = along k (1 KiB);
    # A K-major in the same atoms, 8-row groups 1 KiB apart, the leading offset unused
    (WARPGROUP[0], (8192, 1024, 1), (16, 1024, 1)),
    # 32 k-rows: not whole kilobytes, so 8x8 core matrices of 128 B; leading = along k (128 B),
    # stride = between the 8-column blocks along n (32 rows x 16 B); A from registers
    (WARPGROUP[1], (128, 512, 0), None)])
def test_the_lowering_records_each_descriptors_strides_and_the_printer_prints_them(
        schedule: Schedule, b: tuple[int, int, int], a: tuple[int, int, int] | None) -> None:
    lowered = cuda_lower.lower(rewrite(schedule).kernel)
    found = {(s.b_descriptor, s.a_descriptor) for s in walk(lowered.body)
             if isinstance(s, ir.Wgmma)}

    def desc(t: tuple[int, int, int] | None) -> ir.MatrixDescriptor | None:
        return None if t is None else ir.MatrixDescriptor(leading_bytes=t[0],
                                                          stride_bytes=t[1], mode=t[2])

    assert found == {(desc(b), desc(a))}
    text = target("cuda").print_lowered(lowered)
    assert f"{b[0]}u, {b[1]}u, {b[2]}ull)" in text
    assert (a is None) == ("16u, 1024u, 1ull)" not in text)


IN_FLIGHT = [Schedule(tile=128, step=64, stages=3, warpgroup=True, in_flight=True),
             Schedule(tile=128, step=64, stages=4, warpgroup=True, in_flight=True),
             Schedule(tile=128, step=64, stages=3, wide=True, warpgroup=True, in_flight=True)]
"""Each step's wgmma group left running while the next step is issued; copies stages - 2
ahead, so that no step refills the buffer the step before it read."""


def _waits(schedule: Schedule) -> list[int]:
    lowered = cuda_lower.lower(rewrite(schedule).kernel)
    return [s.pending for s in walk(lowered.body) if isinstance(s, ir.WgmmaWait)]


def _simulate_lowered(kernel: ir.Kernel, launch: Launch) -> dict[str, np.ndarray]:
    return sarek.simulate(kernel, dict(launch.args), grid=launch.grid, block=launch.block,
                          arith="h200")


def test_an_in_flight_schedule_is_named_with_an_f_and_parses_back() -> None:
    assert [s.name for s in IN_FLIGHT] == ["t128k64s3gf", "t128k64s4gf", "t128x256k64s3gf"]
    assert all(Schedule.parse(s.name) == s for s in IN_FLIGHT)
    assert [s.ahead for s in IN_FLIGHT] == [1, 2, 1]


@pytest.mark.parametrize("name", ["t128k64s2gf", "t128k64s3f"])
def test_a_group_in_flight_needs_a_warpgroup_schedule_of_three_stages(name: str) -> None:
    with pytest.raises(ScheduleError, match="warpgroup schedule of 3 or 4 stages"):
        Schedule.parse(name).check(16, 128)


@pytest.mark.parametrize("schedule", IN_FLIGHT, ids=lambda s: s.name)
def test_an_in_flight_kernel_is_the_seeds_bits_under_h200(schedule: Schedule) -> None:
    rw = rewrite(schedule)
    out = sarek.simulate(rw.kernel, dict(rw.args), grid=rw.grid, block=rw.block,
                         target="cuda", arith="h200")
    assert np.array_equal(bits(out["c"]), seed_bits())


@pytest.mark.parametrize("schedule", IN_FLIGHT, ids=lambda s: s.name)
def test_each_step_leaves_its_group_running_and_a_wait_for_all_follows_the_loop(
        schedule: Schedule) -> None:
    lowered = cuda_lower.lower(rewrite(schedule).kernel)
    (loop,) = [s for s in walk(lowered.body) if isinstance(s, ir.For) and s.var == "sk_k0"]
    assert loop.body[-1] == ir.WgmmaWait(pending=1)
    after = lowered.body[lowered.body.index(loop) + 1]
    assert after == ir.WgmmaWait(pending=0)
    assert _waits(schedule) == [1, 0]


@pytest.mark.parametrize("schedule", [*WARPGROUP, *WIDE], ids=lambda s: s.name)
def test_a_schedule_without_a_group_in_flight_waits_for_every_group(
        schedule: Schedule) -> None:
    assert set(_waits(schedule)) == {0}


def test_a_group_stays_waited_for_where_a_is_reloaded_into_registers() -> None:
    # t128k32s3gf: ldmatrix refills the A registers the previous step's wgmma reads
    assert _waits(Schedule(tile=128, step=32, stages=3, warpgroup=True, in_flight=True)) == [0]


def test_a_refill_before_the_wait_that_retires_its_readers_is_a_race() -> None:
    # t128k64s3g refills the buffer the previous step read: with that step's group left in
    # flight, the copy overwrites what the wgmma still reads
    rw = rewrite(Schedule(tile=128, step=64, stages=3, warpgroup=True))
    lowered = cuda_lower.lower(rw.kernel)
    early = lowered.model_copy(update={"body": replace_statements(
        lowered.body, lambda s: [ir.WgmmaWait(pending=1)] if isinstance(s, ir.WgmmaWait)
        else None)})
    with pytest.raises(sarek.SharedRace, match="still read by a wgmma in flight"):
        _simulate_lowered(early, rw)


def test_an_epilogue_before_the_wait_for_all_is_a_register_race() -> None:
    rw = rewrite(IN_FLIGHT[0])
    lowered = cuda_lower.lower(rw.kernel)
    out = _simulate_lowered(lowered, rw)
    assert np.array_equal(bits(out["c"]), seed_bits())
    body = list(lowered.body)
    body.remove(ir.WgmmaWait(pending=0))  # the wait for all after the loop
    with pytest.raises(sarek.RegisterRace, match="'sk_acc0_0_0' is still read or written by a "
                       "wgmma in flight"):
        _simulate_lowered(lowered.model_copy(update={"body": tuple(body)}), rw)


@pytest.mark.skipif(nvrtc_available() is not None, reason=f"NVRTC: {nvrtc_available()}")
def test_the_printed_in_flight_wait_compiles_for_sm_90a() -> None:
    src = sarek.emit(rewrite(IN_FLIGHT[2]).kernel, "cuda")
    assert 'wgmma.commit_group.sync.aligned;\\n" "wgmma.wait_group.sync.aligned 1;"' in src
    assert compile_cubin(src, "sm_90")[:4] == b"\x7fELF"


def _pin(array: str, size: int) -> str:
    return 'asm volatile("" : ' + ", ".join(f'"+f"({array}[{j}])' for j in range(size)) + ");"


@pytest.mark.parametrize("schedule", IN_FLIGHT, ids=lambda s: s.name)
def test_the_wait_for_all_after_the_loop_pins_the_accumulators_it_completes(
        schedule: Schedule) -> None:
    lines = [line.strip() for line in sarek.emit(rewrite(schedule).kernel, "cuda").splitlines()]
    waits = [i for i, line in enumerate(lines) if "wgmma.wait_group.sync.aligned" in line]
    pending = [line[line.index("aligned ") + 8] for line in (lines[i] for i in waits)]
    assert pending == ["1", "0"]
    size = 128 if schedule.wide else 64
    arrays = ["sk_acc0_0_0"] if schedule.wide else ["sk_acc0_0_0", "sk_acc0_1_0"]
    # the wait for all is followed by one pin per accumulator array, the in-flight wait by none
    assert lines[waits[1] + 1:waits[1] + 1 + len(arrays)] == [_pin(a, size) for a in arrays]
    assert not lines[waits[0] + 1].startswith('asm volatile("" :')


_STILL_SERIALIZED = pytest.mark.xfail(strict=True, reason=(
    "ptxas C7515 (non-wgmma instructions defining accumulators inside the pipeline stage): "
    "the byte planes' phases with a group in flight, which the policy takes only where no "
    "tensor map serves the producer (batched operands)"))


def _cuda_wgmma_policy() -> list[object]:
    staging = target("cuda").staging
    return [pytest.param(name, s, marks=_STILL_SERIALIZED)
            if name == "Int32_byte_planes" and s.in_flight else (name, s)
            for name, s in staging.declared if s.warpgroup]


_EXAMPLE = {"F16_operands": "gemm_f16", "Bf16_operands": "gemm_f32",
            "Bf16x3_operands": "gemm_f32", "Int32_byte_planes": "gemm_i32"}


@pytest.mark.skipif(nvrtc_available() is not None, reason=f"NVRTC: {nvrtc_available()}")
@pytest.mark.parametrize(("lowering", "schedule"), _cuda_wgmma_policy(),
                         ids=lambda x: x if isinstance(x, str) else x.name)
def test_ptxas_serializes_no_wgmma_of_a_policy_schedule(lowering: str,
                                                        schedule: Schedule) -> None:
    # ptxas serializes every wgmma of a kernel (warning C7514) where the C++ compiler has
    # moved an access to their registers above the wait that completes them, and injects a
    # wait of its own (C7517) where an access to a group's registers comes before its wait
    from backends.cuda.nvrtc import compile_logged
    from backends.pipeline import compile_launch

    launch = example(_EXAMPLE[lowering]).make(256, 256, 256)
    rw = compile_launch(target("cuda"), launch, lowering=Lowering(lowering), schedule=schedule)
    _, log = compile_logged(rw.text, "sm_90a", "k.cu", ("--ptxas-options=-v",))
    assert "wgmma.mma_async" in rw.text
    assert "C7514" not in log and "Potential Performance Loss" not in log
    assert "C7517" not in log
