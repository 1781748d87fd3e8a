"""The device gate: configurations, support descriptions and verdicts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from backends.spirv.probe import from_vulkan_properties
from sarek import ir
from sarek.coopmat import (
    Available,
    Component,
    Config,
    DeviceSupport,
    GateError,
    Scope,
    Shape,
    Unavailable,
    Unknown,
    Use,
    configs_of,
    same_bits,
    verdict,
)
from sarek.device_support import (
    cuda_support,
    metal_support,
    portable_opencl,
    recorded_h200_vulkan,
    unprobed,
)
from sarek.errors import SarekError
from sarek.ir import ElemType
from sarek.matrix_rewrite import rewrite_launch
from sarek.matrix_scheme import Lowering, config_of

# The H200's list as its driver reported it (Vulkan, driver 580, subgroup scope), written here as
# the VkCooperativeMatrixPropertiesKHR records a probe returns: component codes F16 0, F32 1,
# S8 3, S32 5, U8 7, U32 9, BF16 1000141000; scope SUBGROUP 3.
F16, F32, S8, S32, U8, U32, BF16 = 0, 1, 3, 5, 7, 9, 1000141000
H200_RECORDS = [
    (16, 16, 16, F16, F16, F16, F16), (16, 16, 16, F16, F16, F32, F32),
    (16, 8, 16, F16, F16, F16, F16), (16, 8, 16, F16, F16, F32, F32),
    (16, 8, 8, F16, F16, F16, F16), (16, 8, 8, F16, F16, F32, F32),
    (16, 16, 32, U8, U8, U32, U32), (16, 8, 32, U8, U8, U32, U32),
    (16, 16, 32, S8, S8, S32, S32), (16, 8, 32, S8, S8, S32, S32),
    (16, 16, 16, BF16, BF16, F32, F32),
]


def h200() -> DeviceSupport:
    records = [SimpleNamespace(MSize=m, NSize=n, KSize=k, AType=a, BType=b, CType=c,
                               ResultType=r, saturatingAccumulation=0, scope=3)
               for m, n, k, a, b, c, r in H200_RECORDS]
    return from_vulkan_properties("H200", records)


def cfg(m: int, n: int, k: int, a: Component, c: Component) -> Config:
    return Config(Shape(m, n, k), a, a, c, c)


def test_h200_refuses_the_16x16x16_byte_plane_configuration_with_a_reason() -> None:
    v = verdict(config_of(Lowering.INT32_BYTE_PLANES, ElemType.I32), h200())
    assert isinstance(v, Unavailable)
    assert "16x16x16 u8 x u8 + s32 -> s32" in v.reason
    assert "16x16x32" in v.reason


def test_h200_runs_the_byte_planes_s32_sums_through_u32_accumulators_and_says_so() -> None:
    v = verdict(config_of(Lowering.INT32_BYTE_PLANES, ElemType.I32, 16, 32), h200())
    assert isinstance(v, Available) and "as 16x16x32 u8 x u8 + u32 -> u32" in v.note


def test_s32_sums_of_signed_bytes_have_no_other_configuration() -> None:
    s8 = cfg(16, 16, 32, Component.S8, Component.S32)
    assert same_bits(s8) is None
    u8 = cfg(16, 16, 32, Component.U8, Component.S32)
    assert same_bits(u8) == cfg(16, 16, 32, Component.U8, Component.U32)


def test_h200_accepts_f16_into_f32() -> None:
    assert verdict(config_of(Lowering.F16_OPERANDS, ElemType.F16), h200()) == Available()


def test_h200_accepts_bf16_into_f32_for_bf16x3() -> None:
    assert verdict(config_of(Lowering.BF16X3_OPERANDS, ElemType.F32), h200()) == Available()


def test_h200_refuses_fragment_8_and_lists_the_shapes_it_has() -> None:
    v = verdict(config_of(Lowering.F16_OPERANDS, ElemType.F16, frag=8), h200())
    assert isinstance(v, Unavailable) and "only at 16x16x16, 16x8x16, 16x8x8" in v.reason


def test_recorded_h200_profile_equals_the_design_list() -> None:
    assert recorded_h200_vulkan().configs == h200().configs


def test_unknown_vulkan_component_codes_are_skipped() -> None:
    odd = SimpleNamespace(MSize=16, NSize=16, KSize=16, AType=2, BType=2, CType=2, ResultType=2,
                          saturatingAccumulation=0, scope=3)
    assert from_vulkan_properties("x", [odd]).configs == frozenset()


def test_saturating_configuration_differs_from_a_wrapping_one() -> None:
    wrapping = cfg(16, 16, 16, Component.S8, Component.S32)
    saturating = Config(wrapping.shape, wrapping.a, wrapping.b, wrapping.c, wrapping.result,
                        saturating=True)
    assert verdict(saturating, DeviceSupport("d", frozenset({wrapping}))) != Available()


def test_never_probed_device_is_unknown_with_a_reason() -> None:
    v = verdict(cfg(16, 16, 16, Component.F16, Component.F32), unprobed("some GPU"))
    assert isinstance(v, Unknown) and "never probed" in v.reason


def test_only_available_permits() -> None:
    assert [bool(v) for v in (Available(), Unavailable("no"), Unknown("?"))] == [True, False,
                                                                              False]


def test_portable_opencl_runs_every_configuration() -> None:
    assert verdict(cfg(8, 8, 8, Component.U8, Component.S32), portable_opencl()) == Available()


def test_cuda_sm80_runs_the_16x16x16_float_and_integer_configurations() -> None:
    sm80 = cuda_support(8, 0)
    assert all(verdict(c, sm80) == Available() for c in (
        cfg(16, 16, 16, Component.F16, Component.F32),
        cfg(16, 16, 16, Component.BF16, Component.F32),
        cfg(16, 16, 16, Component.U8, Component.S32)))


def test_cuda_has_no_8x8x8_fragment() -> None:
    assert isinstance(verdict(cfg(8, 8, 8, Component.F16, Component.F32), cuda_support(9, 0)),
                      Unavailable)


def test_cuda_before_sm80_is_refused_with_the_requirement() -> None:
    v = verdict(cfg(16, 16, 16, Component.F16, Component.F32), cuda_support(7, 5))
    assert isinstance(v, Unavailable) and "needs sm_80" in v.reason


def test_metal_apple7_has_8x8_half_into_float() -> None:
    assert verdict(cfg(8, 8, 8, Component.F16, Component.F32), metal_support(7)) == Available()


def test_metal_has_no_integer_matrices() -> None:
    v = verdict(cfg(8, 8, 8, Component.U8, Component.S32), metal_support(9))
    assert isinstance(v, Unavailable) and "no configuration with u8 x u8" in v.reason


def test_metal_before_apple7_supports_nothing() -> None:
    v = verdict(cfg(8, 8, 8, Component.F16, Component.F32), metal_support(6))
    assert isinstance(v, Unavailable) and "Apple7" in v.reason


def test_fragment_dimensions_follow_from_use_and_shape() -> None:
    s = Shape(16, 8, 32)
    assert (s.dims(Use.A), s.dims(Use.B), s.dims(Use.ACCUMULATOR)) == ((16, 32), (32, 8),
                                                                       (16, 8))


def test_components_per_lane_of_a_16x16_fragment_on_32_lanes() -> None:
    assert cfg(16, 16, 16, Component.F16, Component.F32).per_lane(Use.A, 32) == 8


def test_fragment_that_does_not_spread_evenly_is_refused() -> None:
    with pytest.raises(GateError, match="cannot be spread evenly over 24 lanes"):
        cfg(16, 16, 16, Component.F16, Component.F32).per_lane(Use.A, 24)


def test_subgroup_is_the_default_scope() -> None:
    assert cfg(16, 16, 16, Component.F16, Component.F32).scope is Scope.SUBGROUP


# ----------------------------------------------------------------- configurations of a kernel


def test_a_rewritten_kernel_multiplies_with_its_lowerings_configuration(gemm_example) -> None:
    launch = gemm_example.make(24, 20, 18)
    for lowering in Lowering:
        for frag in (16, 8):
            try:
                rw = rewrite_launch(launch, lowering=lowering, frag=frag)
            except SarekError:
                continue  # the lowering does not take this example's operands
            assert configs_of(rw.launch.kernel) == {
                config_of(lowering, rw.gemm.operand_elt, frag)}


def test_a_kernel_without_fragments_multiplies_with_no_configuration(gemm_example) -> None:
    assert configs_of(gemm_example.make(8, 8, 8).kernel) == frozenset()


def test_a_fragment_type_no_matrix_unit_takes_is_named() -> None:
    shape = ir.FragShape(m=16, n=16, k=16)
    frags = [ir.FragDecl(name=n, use=u, shape=shape, elem=e) for n, u, e in (
        ("a", ir.FragUse.A, ElemType.F64), ("b", ir.FragUse.B, ElemType.F64),
        ("c", ir.FragUse.ACCUMULATOR, ElemType.F64))]
    kernel = ir.Kernel(name="k", params=(), body=(*frags, ir.FragMulAdd(d="c", a="a", b="b",
                                                                       c="c")))
    with pytest.raises(GateError, match="'c' holds f64, which no matrix unit multiplies"):
        configs_of(kernel)
