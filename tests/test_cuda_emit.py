"""The CUDA printer: every emitted kernel compiles with NVRTC, tile patterns become the named
inline-PTX instruction once per repeat, and f32 arithmetic is never contracted."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings

from backends.cuda import compile_cubin, emit, nvrtc_available
from conftest import EXAMPLES, GEMM_EXAMPLES, example
from sarek.tile_probe import probe_kernel
from tile_cases import Case, legal_cases

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
    assert len(re.findall(r"asm volatile\(\"ldmatrix\.sync\.aligned\.m8n8\.x2\.shared\.b16", src)) == 2
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


def test_examples_folder_exists() -> None:
    assert EXAMPLES.is_dir()
