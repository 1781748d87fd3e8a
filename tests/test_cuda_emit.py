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


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_shared_arrays_past_48_kib_come_from_one_dynamic_allocation(arch: str) -> None:
    from backends.cuda import shared
    from backends.registry import target
    from sarek.matrix_rewrite import rewrite_launch
    from sarek.schedule import Schedule

    launch = rewrite_launch(example("gemm_f16").make(64, 64, 64),
                            staging=target("cuda").staging,
                            schedule=Schedule(tile=128, step=64, stages=2)).launch
    src = emit(launch.kernel)
    # A: 2 x 128 x (64 + 8) halves, B: 2 x 64 x (128 + 8) halves, the exchange: 4 fragments
    # of 16 rows 16 + 8 f32 apart
    assert shared.dynamic_bytes(launch.kernel) == (2 * (2 * 128 * 72 + 2 * 64 * 136)
                                                   + 4 * 16 * 24 * 4)
    assert "extern __shared__ __align__(16) unsigned char sk_dynamic[];" in src
    assert "__shared__ __align__(16) unsigned short" not in src
    assert compile_cubin(src, arch)[:4] == b"\x7fELF"


def test_more_shared_memory_than_a_block_has_is_refused_with_the_size() -> None:
    from backends.cstyle import EmitError
    from sarek import ir

    huge = ir.Kernel(name="k", params=(), body=(ir.ArrayDecl(
        name="s", elem=ir.ElemType.F32, size=60_000, space=ir.MemSpace.SHARED),))
    with pytest.raises(EmitError, match="240000 bytes of shared memory"):
        emit(huge)


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


def loops_and_pragmas(src: str) -> list[tuple[str, str]]:
    """(the pragma line before it, the loop's body up to its closing brace) per constant loop."""
    lines = src.split("\n")
    out = []
    for i, line in enumerate(lines):
        if line.strip().startswith("#pragma unroll"):
            depth, body = 0, []
            for inner in lines[i + 1:]:
                body.append(inner)
                depth += inner.count("{") - inner.count("}")
                if depth == 0 and "}" in inner:
                    break
            out.append((line.strip(), "\n".join(body)))
    return out


def test_a_constant_loop_around_a_run_time_loop_is_kept_rolled() -> None:
    # Bf16x3's output loops hold the original's own loop over k (for sums beyond 2^127):
    # unrolled, each trip would copy it (the H200 ran the policy kernel 1.33x faster rolled)
    loops = loops_and_pragmas(emit(rewritten("gemm_f32", Lowering.BF16X3_OPERANDS)))
    around = [pragma for pragma, body in loops if "for (int sk_p = 0; sk_p < d;" in body]
    others = [pragma for pragma, body in loops if "sk_p < d" not in body]
    assert around and set(around) == {"#pragma unroll 1"}
    assert others and set(others) == {"#pragma unroll"}


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


def test_compiling_leaves_the_processs_one_byte_objects_alone() -> None:
    # NVRTC writes its log into the buffer it is given: a one-byte log written into CPython's
    # shared b" " turned every space the process encoded afterwards into a NUL.
    launch = example("gemm_f32").make(8, 8, 8)
    compile_cubin(emit(launch.kernel), "sm_80")
    assert " ".encode()[0] == 32  # noqa: UP012 (the encoder hands out the shared byte)
    assert bytes(bytearray(b"x y"))[1:2][0] == 32


def test_the_lowering_records_where_each_shared_array_lies_in_the_dynamic_allocation() -> None:
    from backends.cuda import lower as cuda_lower
    from sarek import ir
    from sarek.ir_walk import walk

    f32, u16 = ir.ElemType.F32, ir.ElemType.U16
    kernel = ir.Kernel(name="k", params=(), body=(
        ir.ArrayDecl(name="a", elem=f32, size=10_000, space=ir.MemSpace.SHARED),  # 40000 B
        ir.ArrayDecl(name="b", elem=u16, size=3, space=ir.MemSpace.SHARED, align=1024),
        ir.ArrayDecl(name="c", elem=f32, size=4000, space=ir.MemSpace.SHARED),
        ir.ArrayDecl(name="d", elem=f32, size=4, space=ir.MemSpace.LOCAL)))
    lowered = cuda_lower.lower(kernel)
    got = {s.name: s.dynamic_offset for s in walk(lowered.body) if isinstance(s, ir.ArrayDecl)}
    # a at 0; b at the next multiple of 1024 after 40000; c at the next of 16 after b's 6 bytes
    assert got == {"a": 0, "b": 40960, "c": 40976, "d": None}
    src = emit(kernel)
    assert "float* const c = (float*)(sk_dynamic + 40976);" in src
    assert "unsigned short* const b = (unsigned short*)(sk_dynamic + 40960);" in src


def test_kernels_within_48_kib_record_no_dynamic_placement() -> None:
    from backends.cuda import lower as cuda_lower
    from sarek import ir
    from sarek.ir_walk import walk

    kernel = ir.Kernel(name="k", params=(), body=(ir.ArrayDecl(
        name="s", elem=ir.ElemType.F32, size=12_288, space=ir.MemSpace.SHARED),))
    lowered = cuda_lower.lower(kernel)
    assert all(s.dynamic_offset is None for s in walk(lowered.body)
               if isinstance(s, ir.ArrayDecl))
    assert "__shared__ __align__(16) float s[12288];" in emit(kernel)


def test_a_launch_asks_for_the_dynamic_shared_memory_the_lowering_placed() -> None:
    from backends.cuda import lower as cuda_lower
    from backends.cuda import shared
    from sarek import ir

    f32 = ir.ElemType.F32
    kernel = ir.Kernel(name="k", params=(), body=(
        ir.ArrayDecl(name="a", elem=f32, size=10_000, space=ir.MemSpace.SHARED),
        ir.ArrayDecl(name="b", elem=f32, size=4000, space=ir.MemSpace.SHARED, align=1024)))
    # b starts at the first multiple of 1024 after a's 40000 bytes and holds 16000
    assert shared.dynamic_bytes(cuda_lower.lower(kernel)) == 40960 + 16000
