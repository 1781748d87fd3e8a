"""The larger schedules keep the seed's promise: every covered output written with the
original's value (bit for bit for integers and exactly representable float products), nothing
else; the schedule a launch gets; refusals of schedules that do not divide."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import example
from test_matrix_rewrite import (
    FLOAT_CASES,
    bits,
    original,
    rewritten,
    small_integers,
    with_operands,
)

from sarek.matrix_pattern import recognize
from sarek.matrix_rewrite import RewriteError, kernel, launch_dims, rewrite_launch
from sarek.matrix_scheme import Lowering
from sarek.schedule import LARGE, SEED, Schedule, ScheduleError
from sarek.staging import Fragments, Staging

SCHEDULES = [LARGE, Schedule(tile=128, step=16), Schedule(tile=64, step=32),
             Schedule(tile=64, step=64), Schedule(prefetch=True),
             Schedule(tile=128, step=16, prefetch=True), Schedule(tile=128, step=32, prefetch=True),
             Schedule(stages=2), Schedule(step=32, stages=3), Schedule(tile=128, step=64, stages=2),
             Schedule(tile=128, step=16, stages=4), Schedule(wide=True),
             Schedule(tile=128, step=32, stages=3, wide=True)]
SIZE = (150, 133, 70)  # more than one large tile each way, ragged, a partial last step
CONFIGS = [(32, 16), (64, 8)]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: s.name)
@pytest.mark.parametrize(("subgroup", "frag"), CONFIGS)
def test_byte_planes_are_bit_identical_under_every_schedule(schedule: Schedule, subgroup: int,
                                                            frag: int) -> None:
    launch = example("gemm_i32").make(*SIZE, seed=1)
    got = rewritten(launch, Lowering.INT32_BYTE_PLANES, subgroup, frag, schedule=schedule)
    assert np.array_equal(got, original(launch))


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: s.name)
@pytest.mark.parametrize(("name", "lowering"), FLOAT_CASES,
                         ids=[f"{n}-{low.value}" for n, low in FLOAT_CASES])
def test_float_lowerings_are_bit_identical_on_small_integers_under_every_schedule(
        schedule: Schedule, name: str, lowering: Lowering) -> None:
    launch = with_operands(example(name).make(*SIZE, seed=3), small_integers(4))
    got = rewritten(launch, lowering, 32, 16, schedule=schedule)
    assert np.array_equal(bits(got), bits(original(launch)))


def test_launch_dims_follow_the_schedule() -> None:
    assert launch_dims(32, me=300, ne=129, ze=2, schedule=LARGE) == ((128, 1, 1), (2, 3, 2))
    wide = Schedule(tile=128, step=32, wide=True)  # 128 x 256 per block of eight waves
    assert launch_dims(32, me=300, ne=257, ze=2, schedule=wide) == ((256, 1, 1), (2, 3, 2))


def test_schedule_names_spell_the_schedule_and_parse_back() -> None:
    for schedule in [*SCHEDULES, SEED]:
        assert Schedule.parse(schedule.name) == schedule
    assert Schedule(tile=128, step=64, stages=2, wide=True).name == "t128x256k64s2"
    with pytest.raises(ScheduleError, match="not a schedule name"):
        Schedule.parse("t128x128k64")  # a wide tile is twice as wide as high
    # but a warpgroup schedule's eight waves may share a square tile, one strip a wave
    narrow = Schedule.parse("t128x128k32s2g")
    assert (narrow.tile_n, narrow.waves, narrow.groups, narrow.name) == (
        128, 8, 2, "t128x128k32s2g")
    assert Staging(strip_rows=16).fragments(narrow, 16) == Fragments(
        rows=1, cols=1, m=16, n=128, shared_b=True)
    with pytest.raises(ScheduleError, match="warpgroup schedule's"):
        Schedule(tile=128, step=32, stages=2, narrow=True).check(16, 256)


def test_a_schedule_that_does_not_divide_is_refused_with_the_reason() -> None:
    launch = example("gemm_f32").make(8, 8, 8)
    with pytest.raises(RewriteError, match="reduction step"):
        kernel(launch.kernel, recognize(launch.kernel), Lowering.F16_OPERANDS,
               schedule=Schedule(tile=64, step=24))
    with pytest.raises(RewriteError, match="block tiles of 64 or 128"):
        kernel(launch.kernel, recognize(launch.kernel), Lowering.F16_OPERANDS,
               schedule=Schedule(tile=96))


def test_a_schedule_keeps_one_to_four_steps_in_shared_memory_and_does_not_also_prefetch(
        ) -> None:
    launch = example("gemm_f16").make(8, 8, 8)
    with pytest.raises(RewriteError, match="1 to 4 steps"):
        kernel(launch.kernel, recognize(launch.kernel), Lowering.F16_OPERANDS,
               schedule=Schedule(stages=5))
    with pytest.raises(RewriteError, match="not both"):
        kernel(launch.kernel, recognize(launch.kernel), Lowering.F16_OPERANDS,
               schedule=Schedule(stages=2, prefetch=True))


def test_a_pipelined_schedule_stages_every_tile_by_staged_copies_raw_where_converted(
        ) -> None:
    from sarek import ir
    from sarek.ir_walk import walk

    def destinations(name: str, lowering: Lowering) -> list[str]:
        launch = example(name).make(8, 8, 8)
        rw = kernel(launch.kernel, recognize(launch.kernel), lowering,
                    schedule=Schedule(stages=3))
        return [s.dst for s in walk(rw.body) if isinstance(s, ir.StageCopy)]

    # A and B before the loop for each step issued ahead (two), and once in the loop.
    assert destinations("gemm_f16", Lowering.F16_OPERANDS) == ["sk_a", "sk_b"] * 3
    # f32 operands are converted at the step that multiplies them: copied raw
    assert destinations("gemm_f32", Lowering.BF16X3_OPERANDS) == ["sk_ra", "sk_rb"] * 3
    assert destinations("gemm_i32", Lowering.INT32_BYTE_PLANES) == ["sk_ra", "sk_rb"] * 3


@pytest.mark.parametrize("schedule", [Schedule(step=32), Schedule(step=64, stages=2)],
                         ids=lambda s: s.name)
def test_byte_planes_multiply_32_deep_where_the_policy_and_the_steps_allow(
        schedule: Schedule) -> None:
    import sarek
    from backends.registry import target
    from sarek import ir
    from sarek.ir_walk import walk

    launch = example("gemm_i32").make(*SIZE)  # int32 over the full range
    cuda = target("cuda")
    rw = rewrite_launch(launch, staging=cuda.staging, schedule=schedule).launch
    assert {s.shape.k for s in walk(rw.kernel.body) if isinstance(s, ir.FragDecl)} == {32}
    assert "mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32" in sarek.emit(rw.kernel, "cuda")
    want = bits(original(launch))
    assert np.array_equal(bits(rw.simulate()["c"]), want)
    lowered = sarek.simulate(rw.kernel, dict(rw.args), grid=rw.grid, block=rw.block,
                             target="cuda")
    assert np.array_equal(bits(lowered["c"]), want)
    seed_steps = rewrite_launch(launch, staging=cuda.staging, schedule=SEED).launch.kernel
    assert {s.shape.k for s in walk(seed_steps.body) if isinstance(s, ir.FragDecl)} == {16}


def test_rewrite_launch_takes_the_targets_large_schedule_for_large_regions_only() -> None:
    policy = Staging(large=(("F16_operands", LARGE),))
    big = example("gemm_f16").make(1024, 1024, 16)
    small = example("gemm_f16").make(1023, 2048, 16)
    assert rewrite_launch(big, staging=policy).schedule == LARGE
    assert rewrite_launch(small, staging=policy).schedule == SEED
    assert rewrite_launch(big).schedule == SEED  # the neutral policy names none
    assert rewrite_launch(big, staging=policy, schedule=SEED).schedule == SEED


def test_the_policy_takes_the_first_large_schedule_the_operands_suit() -> None:
    warpgroup = Schedule(tile=128, step=64, stages=2, warpgroup=True)
    policy = Staging(large=(("F16_operands", warpgroup), ("F16_operands", LARGE)))
    f16 = example("gemm_f16").make(1024, 1024, 16)
    f32 = example("gemm_f32").make(1024, 1024, 16)  # converted to f16: no warpgroup schedule
    assert rewrite_launch(f16, staging=policy).schedule == warpgroup
    assert rewrite_launch(f32, staging=policy, lowering=Lowering.F16_OPERANDS).schedule == LARGE
    with pytest.raises(RewriteError, match="warpgroup schedule multiplies one 16-bit term"):
        rewrite_launch(f32, staging=policy, lowering=Lowering.F16_OPERANDS, schedule=warpgroup)


def test_regions_of_8192_rows_and_columns_prefer_the_huge_schedules_to_the_large_ones() -> None:
    huge = Schedule(tile=128, step=64, stages=2, warpgroup=True)
    policy = Staging(huge=(("F16_operands", huge),), large=(("F16_operands", LARGE),))
    assert policy.candidates("F16_operands", 8192, 8192) == (huge, LARGE, SEED)
    assert policy.candidates("F16_operands", 8191, 8192) == (LARGE, SEED)
    assert policy.candidates("F16_operands", 8192, 1023) == (SEED,)
    assert policy.candidates("Bf16_operands", 8192, 8192) == (SEED,)
