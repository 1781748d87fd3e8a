"""Random GEMM kernels (``gemm_gen``: mappings, guards, layouts, strides, offsets, initial values,
epilogues, ragged and partial launches), rewritten with a random subgroup and fragment: the
rewritten kernel leaves C bit-identical to the original kernel and writes exactly the covered
outputs (``test_matrix_rewrite_canaries.check``). Sizes are scaled up so that outputs span
several 64x64 tiles and reductions several steps of 16.
"""

from __future__ import annotations

from dataclasses import replace

from gemm_gen import GemmSpec, gemm_specs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_matrix_rewrite_canaries import check, generated

from sarek.matrix_scheme import Lowering

SETTINGS = settings(deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
CONFIGS = st.sampled_from([(32, 16), (32, 8), (64, 16), (64, 8)])
FLOAT_LOWERINGS = st.sampled_from([Lowering.BF16X3_OPERANDS, Lowering.BF16_OPERANDS,
                                   Lowering.F16_OPERANDS])


@st.composite
def scaled_specs(draw: st.DrawFn, elem: str = "i32") -> GemmSpec:
    """A ``gemm_specs`` kernel whose sizes are multiplied: rows and columns up to 70, the
    reduction up to 40."""
    spec = draw(gemm_specs(elem))
    return replace(spec, m=spec.m * draw(st.integers(1, 10)),
                   n=spec.n * draw(st.integers(1, 10)), k=spec.k * draw(st.integers(1, 8)))


@settings(SETTINGS, max_examples=25)
@given(scaled_specs(), CONFIGS)
def test_rewritten_int32_kernel_equals_the_original_bit_for_bit(
        spec: GemmSpec, config: tuple[int, int]) -> None:
    check(generated(spec), Lowering.INT32_BYTE_PLANES, *config)


@settings(SETTINGS, max_examples=15)
@given(scaled_specs("f32"), FLOAT_LOWERINGS, CONFIGS)
def test_rewritten_f32_kernel_on_small_integers_equals_the_original_bit_for_bit(
        spec: GemmSpec, lowering: Lowering, config: tuple[int, int]) -> None:
    check(generated(spec), lowering, *config)
