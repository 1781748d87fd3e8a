"""Warpgroup schedules staged by bulk tensor copies (``b``, ``backends.cuda.tma``): the
lowered kernel is the seed's bits under the ``h200`` model where the operands take tensor
maps and where they fall back to ``cp.async``, the simulator reports a stage read before
its mbarrier phase, and the printed CUDA compiles for sm_90a."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import example
from test_matrix_rewrite import bits

import sarek
from backends.cuda import compile_cubin, nvrtc_available, tma
from backends.cuda import lower as cuda_lower
from backends.registry import target
from sarek import ir
from sarek.ir_walk import replace_statements, walk
from sarek.launch import Launch
from sarek.matrix_rewrite import rewrite_launch
from sarek.schedule import Schedule, ScheduleError

BULK = Schedule.parse("t128x256k64s3gfb")
ALIGNED = (150, 136, 72)  # rows of 144 and 272 bytes: tensor maps; ragged tiles each way
UNALIGNED = (150, 133, 70)  # rows of 140 and 266 bytes: cp.async


def rewrite(schedule: Schedule, size: tuple[int, int, int]) -> Launch:
    launch = example("gemm_f16").make(*size, seed=5)
    return rewrite_launch(launch, staging=target("cuda").staging, schedule=schedule).launch


def simulate(rw: Launch, kernel: ir.Kernel | None = None) -> np.ndarray:
    if kernel is None:
        return bits(sarek.simulate(rw.kernel, dict(rw.args), grid=rw.grid, block=rw.block,
                                   target="cuda", arith="h200")["c"])
    return bits(sarek.simulate(kernel, dict(rw.args), grid=rw.grid, block=rw.block,
                               arith="h200")["c"])


def test_a_bulk_schedule_is_named_with_a_b_after_the_g() -> None:
    assert BULK.bulk and BULK.name == "t128x256k64s3gfb"
    with pytest.raises(ScheduleError, match="warpgroup schedule's tiles"):
        Schedule.parse("t128k64s3b").check(16, 256)


def test_the_neutral_rewrite_marks_its_copies_bulk_and_means_the_same() -> None:
    rw = rewrite(BULK, ALIGNED)
    copies = [s for s in walk(rw.kernel.body) if isinstance(s, ir.StageCopy)]
    assert copies and all(s.bulk for s in copies)
    plain = rewrite(Schedule.parse("t128x256k64s3gf"), ALIGNED)
    assert np.array_equal(bits(rw.simulate()["c"]), bits(plain.simulate()["c"]))


@pytest.mark.parametrize("size", [ALIGNED, UNALIGNED], ids=["maps", "cp-async"])
def test_the_lowered_bulk_kernel_is_the_seeds_bits(size: tuple[int, int, int]) -> None:
    assert np.array_equal(simulate(rewrite(BULK, size)), simulate(rewrite(Schedule(), size)))


def test_each_step_issues_one_box_of_a_and_four_of_b_from_one_invocation() -> None:
    lowered = cuda_lower.lower(rewrite(BULK, ALIGNED).kernel)
    boxes = [s for s in walk(lowered.body) if isinstance(s, ir.BulkTensorCopy)]
    # the prologue's step and the loop's refill: A 128 x 64, B 64 x 256 as four 64 x 64
    assert sorted((s.src, s.rows, s.cols) for s in boxes) == sorted(
        2 * ([("a", 128, 64)] + 4 * [("b", 64, 64)]))
    assert {s.swizzle for s in boxes} == {128}
    assert [(m.src, m.rows, m.cols) for m in tma.maps(lowered)] == [("a", 128, 64),
                                                                   ("b", 64, 64)]


def test_a_map_is_usable_only_for_16_byte_aligned_rows() -> None:
    lowered = cuda_lower.lower(rewrite(BULK, ALIGNED).kernel)
    a, b = tma.maps(lowered)
    scalars = {"k": 72, "n": 136, "me": 150, "ne": 136, "d": 72, "m": 150}
    assert a.usable(scalars) is None and b.usable(scalars) is None
    assert "not multiples of 16 bytes" in (a.usable({**scalars, "k": 70}) or "")


def test_reading_a_stage_before_its_mbarrier_wait_is_a_race() -> None:
    rw = rewrite(BULK, ALIGNED)
    lowered = cuda_lower.lower(rw.kernel)
    early = lowered.model_copy(update={"body": replace_statements(
        lowered.body, lambda s: [] if isinstance(s, ir.MbarrierWait) else None)})
    with pytest.raises(sarek.SharedRace, match="still being copied by a bulk tensor copy"):
        simulate(rw, early)


def test_a_wait_with_one_parity_for_every_phase_is_misuse() -> None:
    rw = rewrite(BULK, ALIGNED)
    lowered = cuda_lower.lower(rw.kernel)
    wrong = lowered.model_copy(update={"body": replace_statements(
        lowered.body, lambda s: [s.model_copy(update={"parity": ir.Const(value=0,
                                                                          type=ir.ElemType.I32)})]
        if isinstance(s, ir.MbarrierWait) else None)})
    with pytest.raises(sarek.MbarrierMisuse, match="parity names the phase in progress"):
        simulate(rw, wrong)


@pytest.mark.skipif(nvrtc_available() is not None, reason=f"NVRTC: {nvrtc_available()}")
def test_the_printed_bulk_kernel_compiles_for_sm_90a() -> None:
    src = sarek.emit(rewrite(BULK, ALIGNED).kernel, "cuda")
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" \
        in src
    assert "const __grid_constant__ sk_tensor_map sk_map1)" in src
    assert "mbarrier.try_wait.parity.shared::cta.b64" in src
    assert compile_cubin(src, "sm_90")[:4] == b"\x7fELF"


def test_the_launch_asks_for_the_shared_memory_of_the_lowered_kernel_and_passes_its_maps(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the lowering adds the mbarriers to the shared arrays: a launch sized for the neutral
    # kernel's arrays would leave them, or the last array, outside its allocation
    from backends.cuda import run as cuda_run
    from backends.cuda.shared import dynamic_bytes

    rw = rewrite(BULK, ALIGNED)
    seen: dict[str, object] = {}

    def launch(cubin: bytes, name: str, params: list[object], grid: object, block: object,
               shared: int, maps: tuple[tma.Request, ...]) -> list[None]:
        seen.update(shared=shared, maps=maps)
        return [None] * len(params)

    monkeypatch.setattr(cuda_run, "compile_cubin", lambda *a: b"")
    monkeypatch.setattr(cuda_run, "launch_cubin", launch)
    cuda_run.run(rw.kernel, dict(rw.args), rw.grid, rw.block, arch="sm_90")
    lowered = cuda_lower.lower(rw.kernel)
    assert seen["shared"] == dynamic_bytes(lowered) == dynamic_bytes(rw.kernel) + 2 * 8
    maps = seen["maps"]
    assert isinstance(maps, tuple) and [(r.param, r.stride, r.rows, r.cols, r.usable)
                                        for r in maps] == [(0, 72, 150, 72, True),
                                                           (1, 136, 72, 136, True)]


def _negative_zeros(monkeypatch: pytest.MonkeyPatch | None = None) -> np.ndarray:
    """The lowered bulk kernel's output for -0.0 operands A and initial values and +0.0 B,
    under the sequential model (each product added in k order), where -0.0 + -0.0 stays
    -0.0 and -0.0 + +0.0 is +0.0 (under ``h200`` every such sum is +0.0 anyway)."""
    from gemm_gen import varying_init_launch

    launch = varying_init_launch(130, 136, 72)
    args = {**launch.args, "a": np.full(130 * 72, -0.0, np.float16),
            "b": np.zeros(72 * 136, np.float16), "c": np.full(130 * 136, -0.0, np.float32)}
    launch = Launch(launch.kernel, args, launch.grid, launch.block)
    rw = rewrite_launch(launch, staging=target("cuda").staging, schedule=BULK).launch
    return sarek.simulate(rw.kernel, dict(rw.args), grid=rw.grid, block=rw.block,
                          target="cuda", arith="sequential")["c"]


def test_a_partial_tile_of_a_keeps_its_negative_zero_padding(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A pads past k with -0.0 (the product -0.0 * +0.0 leaves every sum as it is); TMA fills
    # with +0.0, so a tile of A not wholly inside the region (k = 72: the second step) is
    # copied by cp.async
    assert np.signbit(_negative_zeros()).all()
    # a lowering that let TMA copy it would turn every output +0.0
    import types

    monkeypatch.setattr(tma, "math", types.SimpleNamespace(copysign=lambda *_: 1.0))
    assert not np.signbit(_negative_zeros()).any()


def test_a_tensor_maps_origin_is_proved_the_same_for_every_block() -> None:
    """A copy takes a tensor map only where ``src_offset`` less its start is, as a
    polynomial, of scalar parameters alone: block-dependent terms must cancel exactly."""
    from sarek.ir_build import add, binary, const, mul, var

    scalars = frozenset({"m", "k"})
    row = mul(var("sk_bx"), const(128))  # a value of the block, not a parameter
    quarter = binary(ir.BinOp.DIV, var("sk_bx"), const(4))
    cancelled = binary(ir.BinOp.SUB, add(mul(row, var("k")), var("m")), mul(row, var("k")))
    assert tma._of_scalars(cancelled, scalars)
    assert tma._of_scalars(binary(ir.BinOp.SUB, mul(quarter, var("k")),
                                  mul(var("k"), quarter)), scalars)
    assert tma._of_scalars(binary(ir.BinOp.DIV, var("m"), const(2)), scalars)
    assert not tma._of_scalars(mul(row, var("k")), scalars)
    assert not tma._of_scalars(mul(quarter, var("k")), scalars)
    assert not tma._of_scalars(add(var("m"), const(1)), frozenset({"k"}))
    select = ir.Select(cond=binary(ir.BinOp.LT, var("m"), const(0)), a=var("m"), b=var("k"),
                       type=ir.ElemType.I32)
    assert not tma._of_scalars(select, scalars)
