"""Lowerings: which one a nest gets, their names, and the configuration each multiplies with."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import example

from sarek.coopmat import Component, Scope, Shape
from sarek.ir import ElemType
from sarek.matrix_pattern import recognize
from sarek.matrix_rewrite import operands_refusal
from sarek.matrix_scheme import (
    CHUNK,
    SUPPORTED_FRAGMENT,
    SUPPORTED_SUBGROUP,
    Lowering,
    LoweringError,
    config_of,
    lowering_name,
    select,
)
from sarek.schedule import Schedule, ScheduleError

F32 = recognize(example("gemm_f32").make(8, 8, 8).kernel)
I32 = recognize(example("gemm_i32").make(8, 8, 8).kernel)
F16 = recognize(example("gemm_f16").make(8, 8, 8).kernel)


def with_operands(elem: ElemType, acc: ElemType = ElemType.F32):  # type: ignore[no-untyped-def]
    return dataclasses.replace(F32, a=dataclasses.replace(F32.a, elem=elem),
                               b=dataclasses.replace(F32.b, elem=elem), acc_type=acc)


def test_names_are_the_design_names() -> None:
    assert [lowering_name(x) for x in Lowering] == [
        "Int32_byte_planes", "F16_operands", "Bf16_operands", "Bf16x3_operands",
        "Int8_operands"]


def test_supported_subgroups_and_fragments() -> None:
    assert (SUPPORTED_SUBGROUP, SUPPORTED_FRAGMENT) == ((32, 64), (16, 8))


def test_int32_takes_byte_planes() -> None:
    assert select(I32) is Lowering.INT32_BYTE_PLANES


def test_f16_takes_f16_operands() -> None:
    assert select(F16) is Lowering.F16_OPERANDS


def test_bf16_takes_bf16_operands() -> None:
    assert select(with_operands(ElemType.BF16)) is Lowering.BF16_OPERANDS


def test_f32_accurate_takes_three_bf16_terms() -> None:
    assert select(F32, "accurate") is Lowering.BF16X3_OPERANDS


def test_f32_fast_takes_bf16_operands() -> None:
    assert select(F32, "fast") is Lowering.BF16_OPERANDS


def test_f64_operands_are_refused() -> None:
    with pytest.raises(LoweringError, match="no lowering takes f64 operands"):
        select(with_operands(ElemType.F64, ElemType.F64))


def test_float_accumulator_other_than_f32_is_refused() -> None:
    with pytest.raises(LoweringError, match="matrix units accumulate in f32"):
        select(with_operands(ElemType.F32, ElemType.F64))


@pytest.mark.parametrize("elem", [ElemType.I8, ElemType.U8])
def test_int8_operands_take_int8_operands(elem: ElemType) -> None:
    assert select(with_operands(elem, ElemType.I32)) is Lowering.INT8_OPERANDS


def test_int8_operands_with_a_narrower_accumulator_are_refused() -> None:
    with pytest.raises(LoweringError, match="integer matrix units accumulate in wrapping i32"):
        select(with_operands(ElemType.I8, ElemType.I16))


def test_i16_operands_are_refused() -> None:
    with pytest.raises(LoweringError, match="no lowering takes i16 operands"):
        select(with_operands(ElemType.I16, ElemType.I32))


def test_unknown_precision_is_refused() -> None:
    with pytest.raises(LoweringError, match="precision must be"):
        select(F32, "exact")  # type: ignore[arg-type]


def test_byte_planes_multiply_u8_into_s32() -> None:
    c = config_of(Lowering.INT32_BYTE_PLANES, ElemType.I32)
    assert (c.shape, c.a, c.b, c.c, c.result) == (Shape(16, 16, 16), Component.U8,
                                                  Component.U8, Component.S32, Component.S32)


def test_f16_operands_from_f32_arrays_multiply_f16_into_f32() -> None:
    c = config_of(Lowering.F16_OPERANDS, ElemType.F32)
    assert (c.a, c.c, c.scope, c.saturating) == (Component.F16, Component.F32, Scope.SUBGROUP,
                                                 False)


def test_bf16x3_multiplies_bf16_into_f32_with_fragment_8() -> None:
    c = config_of(Lowering.BF16X3_OPERANDS, ElemType.F32, frag=8)
    assert (c.shape, c.a, c.result) == (Shape(8, 8, 8), Component.BF16, Component.F32)


def test_fragment_without_template_is_refused() -> None:
    with pytest.raises(LoweringError, match="fragment 32 has no template"):
        config_of(Lowering.F16_OPERANDS, ElemType.F16, frag=32)


def test_lowering_that_does_not_fit_the_operands_is_refused() -> None:
    with pytest.raises(LoweringError, match="F16_operands takes f16 or f32 operands, not i32"):
        config_of(Lowering.F16_OPERANDS, ElemType.I32)


def test_every_step_a_bf16x3_schedule_takes_divides_its_chunk() -> None:
    """Every schedule then adds the running sums to their totals after the same sub-steps;
    the rewrite refuses Bf16x3 the steps that do not divide ``CHUNK`` (48, and the stacked
    byte planes' 128), with the reason."""
    launch = example("gemm_f32").make(8, 8, 8)
    gemm = recognize(launch.kernel)
    steps = set()
    for step in range(1, 257):
        for name in (f"t64k{step}", f"t128k{step}s2g"):
            try:
                Schedule.parse(name).check(16, 128)
            except ScheduleError:
                continue
            if operands_refusal(gemm, Lowering.BF16X3_OPERANDS, Schedule.parse(name)) is None:
                steps.add(step)
    assert steps == {16, 32, 64} and all(CHUNK % step == 0 for step in steps)
