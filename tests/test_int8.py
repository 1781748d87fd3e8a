"""``Int8_operands``: i8 and u8 operands, as written, multiplied on integer matrix units into a
wrapping i32 accumulator; bit-identical to the original kernel modulo 2^32 on every target that
prints it, and refused with the reason where a target has no integer fragments.

Expected values: NumPy's int64 product reduced modulo 2^32 (``examples/gemm_i8.py``'s
``reference``), or the original kernel simulated as written.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from conftest import example
from gemm_gen import build_source

import sarek
from backends import registry
from sarek.ir import ElemType
from sarek.launch import Launch
from sarek.matrix_pattern import recognize
from sarek.matrix_rewrite import rewrite_launch
from sarek.matrix_scheme import Lowering, config_of, select

SIZE = (70, 45, 67)  # ragged; 67 is two 32-deep steps and a partial third


def i8_launch(seed: int = 0) -> Launch:
    run: Launch = example("gemm_i8").make(*SIZE, seed=seed)
    return run


def u8_launch() -> Launch:
    """``gemm_i8`` written over u8 arrays, the operands at the u8 extremes."""
    src = '''
def matmul_u8(a: Global[u8], b: Global[u8], bias: Global[i32], c: Global[i32], m: i32, n: i32,
              k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = bias[col]
        for p in range(k):
            acc += i32(a[row * k + p]) * i32(b[p * n + col])
        c[row * n + col] = acc
'''
    run = i8_launch()
    rng = np.random.default_rng(3)
    m, n, k = SIZE
    args = {**run.args, "a": rng.choice(np.array([0, 1, 254, 255], np.uint8), m * k),
            "b": rng.choice(np.array([0, 128, 255], np.uint8), k * n)}
    return replace(run, kernel=build_source(src, "matmul_u8").ir, args=args)


def expected(run: Launch) -> np.ndarray:
    out: np.ndarray = example("gemm_i8").reference(run)["c"]
    return out


def test_i8_and_u8_operands_select_int8_operands() -> None:
    assert select(recognize(i8_launch().kernel)) is Lowering.INT8_OPERANDS
    assert select(recognize(u8_launch().kernel)) is Lowering.INT8_OPERANDS


def test_the_configuration_keeps_the_operands_signedness() -> None:
    assert str(config_of(Lowering.INT8_OPERANDS, ElemType.I8, 16, 32)) == (
        "16x16x32 s8 x s8 + s32 -> s32 (subgroup)")
    assert config_of(Lowering.INT8_OPERANDS, ElemType.U8).a.value == "u8"


@pytest.mark.parametrize("make", [i8_launch, u8_launch], ids=["i8", "u8"])
def test_the_original_kernel_is_the_numpy_product_modulo_2_32(make: object) -> None:
    run = make()  # type: ignore[operator]
    assert np.array_equal(run.simulate()["c"], expected(run))


PRINTED = [(t, sg, frag) for t in ("cuda", "opencl-nv", "opencl", "spirv")
           for sg, frag in ((32, 16), (64, 8))
           if registry.target(t).refuses(Lowering.INT8_OPERANDS, sg, frag) is None]


@pytest.mark.parametrize("make", [i8_launch, u8_launch], ids=["i8", "u8"])
@pytest.mark.parametrize(("target", "subgroup", "frag"), PRINTED,
                         ids=[f"{t}-{sg}-{f}" for t, sg, f in PRINTED])
def test_the_rewrite_as_printed_is_bit_identical_modulo_2_32(
        make: object, target: str, subgroup: int, frag: int) -> None:
    run = make()  # type: ignore[operator]
    done = rewrite_launch(run, subgroup=subgroup, frag=frag,
                          staging=registry.target(target).staging)
    assert done.lowering is Lowering.INT8_OPERANDS
    assert np.array_equal(done.launch.simulate(target=target)["c"], expected(run))


def test_vulkan_multiplies_8_bit_fragments_32_deep(h200_vulkan: None) -> None:
    vulkan = registry.target("vulkan")
    done = rewrite_launch(i8_launch(), staging=vulkan.staging)
    assert done.schedule.step == 32
    text = sarek.emit(done.launch.kernel, target="spirv")
    assert "OpTypeCooperativeMatrixKHR %i8 %c_u32_3 %c_u32_16 %c_u32_32" in text
    assert vulkan.refuses(Lowering.INT8_OPERANDS, 32, 16) is None


def test_vulkan_refuses_8x8_int8_fragments_with_the_configurations_it_has(h200_vulkan: None
                                                                          ) -> None:
    reason = registry.target("vulkan").refuses(Lowering.INT8_OPERANDS, 32, 8)
    assert reason is not None and "only at 16x16x32, 16x8x32" in reason


def test_metal_refuses_int8_operands_with_its_reason() -> None:
    reason = registry.target("metal").refuses(Lowering.INT8_OPERANDS, 32, 8)
    assert reason is not None and "Metal has no integer simdgroup matrices" in reason
