"""The CUDA printer: every emitted kernel compiles with NVRTC, tile patterns become the named
inline-PTX instruction once per repeat, and f32 arithmetic is never contracted."""

from __future__ import annotations

import re

import pytest
from conftest import GEMM_EXAMPLES, example
from hypothesis import given, settings
from tile_cases import Case, legal_cases

from backends.cstyle import EmitError
from backends.cuda import compile_cubin, emit, nvrtc_available
from sarek import ir
from sarek.matrix_rewrite import rewrite_launch
from sarek.matrix_scheme import Lowering
from sarek.tile_probe import probe_kernel

pytestmark = pytest.mark.skipif(nvrtc_available() is not None,
                                reason=f"NVRTC unavailable: {nvrtc_available()}")


def probe_source(case: Case) -> str:
    return emit(probe_kernel(case.opcode, case.shared, case.shared_words, case.registers,
                             case.register_words))


@pytest.mark.parametrize("name", GEMM_EXAMPLES)
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_gemm_example_compiles(name: str, arch: str) -> None:
    kernel = example(name).make(8, 8, 8).kernel
    assert compile_cubin(emit(kernel), arch)[:4] == b"\x7fELF"


def test_seed_example_emits_two_x2_loads_and_no_x4() -> None:
    src = emit(example("ldmatrix_interleaved").ldmatrix_interleaved.ir)
    x2 = r"asm volatile\(\"ldmatrix\.sync\.aligned\.m8n8\.x2\.shared\.b16"
    assert len(re.findall(x2, src)) == 2
    assert ".x4" not in src
    assert compile_cubin(src, "sm_80")[:4] == b"\x7fELF"


@settings(max_examples=12, deadline=None)
@given(legal_cases("ldmatrix"))
def test_every_legal_ldmatrix_case_compiles_for_sm80(case: Case) -> None:
    src = probe_source(case)
    assert src.count(case.opcode + " ") == case.repeats
    compile_cubin(src, "sm_80")


@settings(max_examples=12, deadline=None)
@given(legal_cases("stmatrix"))
def test_every_legal_stmatrix_case_compiles_for_sm90(case: Case) -> None:
    src = probe_source(case)
    assert src.count(case.opcode + " ") == case.repeats
    compile_cubin(src, "sm_90")


def test_f32_arithmetic_uses_rounding_intrinsics() -> None:
    src = emit(example("gemm_f32").matmul.ir)
    assert "__fmul_rn(" in src and "__fadd_rn(" in src
    body = src[src.index("extern"):]
    assert not re.search(r"[^_]fmaf?\(", body)


# ------------------------------------------------------------------------- rewritten kernels


def rewritten(name: str, lowering: Lowering, subgroup: int = 32, frag: int = 16) -> ir.Kernel:
    launch = example(name).make(40, 24, 20)
    return rewrite_launch(launch, lowering=lowering, subgroup=subgroup, frag=frag).launch.kernel


@pytest.mark.parametrize(("name", "lowering"), [
    ("gemm_f16", Lowering.F16_OPERANDS), ("gemm_f32", Lowering.BF16X3_OPERANDS),
    ("gemm_f32", Lowering.BF16_OPERANDS), ("gemm_epilogue", Lowering.F16_OPERANDS),
    ("gemm_i32", Lowering.INT32_BYTE_PLANES), ("gemm_batched", Lowering.BF16X3_OPERANDS),
])
def test_rewritten_kernels_compile_to_mma_sync(name: str, lowering: Lowering) -> None:
    src = emit(rewritten(name, lowering))
    assert "mma.sync.aligned.m16n8k16" in src
    assert compile_cubin(src, "sm_80")[:4] == b"\x7fELF"


def test_aligned_shared_fragments_load_with_ldmatrix() -> None:
    src = emit(rewritten("gemm_f16", Lowering.F16_OPERANDS))
    assert src.count('asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16') == 2  # A frags
    assert src.count('asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16') == 2  # B


def test_fragment_8_is_refused_on_cuda() -> None:
    with pytest.raises(EmitError, match="no 8x8x8 float shape"):
        emit(rewritten("gemm_f16", Lowering.F16_OPERANDS, frag=8))


def test_subgroup_64_is_refused_on_cuda() -> None:
    with pytest.raises(EmitError, match=r"subgroups of 32 lanes; kernel .* is written for 64"):
        emit(rewritten("gemm_f16", Lowering.F16_OPERANDS, subgroup=64))
