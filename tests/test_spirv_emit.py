"""The SPIR-V printer and its lowering check, without a GPU: every example (original, and
rewritten under every lowering, subgroup and fragment) and every arithmetic probe assembles with
spirv-as and passes ``spirv-val --target-env vulkan1.3``; the printed instructions are the
lowered kernel's (one OpCooperativeMatrixMulAddKHR per FragMulAdd, each load's layout and
stride, signedness operands, NoContraction on every float add and multiply, the barrier's
scope and semantics); planted printer errors are caught; what cooperative matrices cannot
express is refused with the reason."""

from __future__ import annotations

import importlib
import re
import struct
from collections.abc import Iterator

import numpy as np
import pytest
from arith_cases import FLOATS, INTS, binary_kernel, cast_kernel
from conftest import GEMM_EXAMPLES, example

import sarek
from backends.cstyle import EmitError
from backends.spirv import assemble, check, emit, print_kernel, tools_reason
from backends.spirv import emit as emit_module
from backends.spirv.lower import STAGING, lower
from sarek import ir
from sarek.ir import ElemType, FragLayout, FragUse
from sarek.ir_walk import walk
from sarek.matrix_pattern import recognize
from sarek.matrix_rewrite import rewrite_launch
from sarek.matrix_scheme import Lowering, lowerings_taking

pytestmark = pytest.mark.skipif(tools_reason() is not None,
                                reason=f"SPIRV-Tools unavailable: {tools_reason()}")
CONFIGS = ((32, 16), (32, 8), (64, 16), (64, 8))


def rewrites() -> Iterator[tuple[str, ir.Kernel]]:
    for name in GEMM_EXAMPLES:
        launch = example(name).make(40, 24, 20)
        for low in lowerings_taking(recognize(launch.kernel).operand_elt):
            for sg, frag in CONFIGS:
                rw = rewrite_launch(launch, lowering=low, subgroup=sg, frag=frag,
                                    staging=STAGING)
                yield f"{name}-{low}-sg{sg}-f{frag}", rw.launch.kernel


REWRITES = list(rewrites())


@pytest.mark.parametrize("name", GEMM_EXAMPLES)
def test_every_original_example_validates(name: str) -> None:
    assert check(emit(example(name).make(8, 8, 8).kernel))[:4] == struct.pack("<I", 0x07230203)


@pytest.mark.parametrize("kernel", [k for _, k in REWRITES], ids=[n for n, _ in REWRITES])
def test_every_rewrite_validates(kernel: ir.Kernel) -> None:
    check(emit(kernel))


def test_every_arithmetic_probe_validates() -> None:
    kernels = [binary_kernel(t)[0] for t in INTS + FLOATS]
    kernels += [cast_kernel(t) for t in [*INTS, *FLOATS, ElemType.F16, ElemType.BF16]]
    for k in kernels:
        check(emit(k))


def test_a_malformed_module_is_rejected_with_the_tools_message() -> None:
    text = emit(example("gemm_f32").make(8, 8, 8).kernel)
    with pytest.raises(sarek.SarekError, match="spirv-val"):
        check(text.replace("OpMemoryModel Logical Vulkan", "OpMemoryModel Logical GLSL450"))


# ----------------------------------------------------------------- what is printed


def named(kernel: str) -> ir.Kernel:
    return dict(REWRITES)[kernel]


def test_one_cooperative_matrix_instruction_per_fragment_statement() -> None:
    for name, kernel in REWRITES[:12]:
        text = emit(kernel)
        stmts = list(walk(kernel.body))
        for kind, op in (("frag_mul_add", "OpCooperativeMatrixMulAddKHR"),
                         ("frag_load", "OpCooperativeMatrixLoadKHR"),
                         ("frag_store", "OpCooperativeMatrixStoreKHR")):
            assert text.count(f"{op} ") == sum(s.kind == kind for s in stmts), (name, op)
        adds = re.findall(r"= OpF(Add|Sub) %cm_acc_f32_", text)  # whole accumulators
        assert adds.count("Add") == sum(s.kind == "frag_add" and not s.subtract
                                        for s in stmts), name
        assert adds.count("Sub") == sum(s.kind == "frag_add" and s.subtract
                                        for s in stmts), name
    assert any(s.kind == "frag_add" for s in walk(REWRITES[0][1].body))  # Bf16x3 is here


def load_operands(text: str) -> list[tuple[str, str]]:
    """(layout constant, stride constant) of every cooperative-matrix load and store."""
    loads = re.findall(r"OpCooperativeMatrixLoadKHR %\w+ %\w+ (%\w+) (%\w+)", text)
    stores = re.findall(r"OpCooperativeMatrixStoreKHR %\w+ %\w+ (%\w+) (%\w+)", text)
    return loads + stores


def expected_operands(kernel: ir.Kernel) -> list[tuple[str, str]]:
    moves: list[ir.FragLoad | ir.FragStore] = [
        s for s in walk(kernel.body) if isinstance(s, ir.FragLoad)]
    moves += [s for s in walk(kernel.body) if isinstance(s, ir.FragStore)]
    out = []
    for s in moves:
        assert isinstance(s.stride, ir.Const)
        out.append((f"%c_u32_{0 if s.layout is FragLayout.ROW else 1}",
                    f"%c_i32_{s.stride.value}"))
    return out


def layouts_printed_as_lowered(kernel: ir.Kernel, text: str) -> bool:
    return sorted(load_operands(text)) == sorted(expected_operands(kernel))


def test_each_load_and_store_carries_the_lowered_layout_and_stride() -> None:
    for name in ("gemm_i32-Int32_byte_planes-sg32-f16", "gemm_f16-F16_operands-sg32-f8"):
        kernel = named(name)
        assert layouts_printed_as_lowered(kernel, emit(kernel)), name


def test_column_major_b_is_loaded_column_major() -> None:
    launch = example("gemm_i32").make(40, 24, 20)
    from backends.cuda.lower import STAGING as CUDA_STAGING

    rw = rewrite_launch(launch, lowering=Lowering.INT32_BYTE_PLANES, staging=CUDA_STAGING)
    text = emit(rw.launch.kernel)
    assert any(layout == "%c_u32_1" for layout, _ in load_operands(text))
    assert layouts_printed_as_lowered(rw.launch.kernel, text)


def test_integer_products_carry_the_signedness_operands() -> None:
    text = emit(named("gemm_i8-Int8_operands-sg32-f16"))
    adds = re.findall(r"OpCooperativeMatrixMulAddKHR .*", text)
    assert adds and all(a.endswith("MatrixASignedComponentsKHR|MatrixBSignedComponentsKHR|"
                                   "MatrixCSignedComponentsKHR|"
                                   "MatrixResultSignedComponentsKHR") for a in adds)
    # u8 x u8 operands into u32 accumulators (the byte planes' s32 sums, same bits): unsigned
    planes = re.findall(r"OpCooperativeMatrixMulAddKHR .*",
                        emit(named("gemm_i32-Int32_byte_planes-sg32-f16")))
    assert planes and all(a.startswith("OpCooperativeMatrixMulAddKHR %cm_acc_u32_")
                          and "Signed" not in a for a in planes)
    float_adds = re.findall(r"OpCooperativeMatrixMulAddKHR .*",
                            emit(named("gemm_f16-F16_operands-sg32-f16")))
    assert float_adds and not any("Signed" in a for a in float_adds)


def uncontracted(text: str) -> bool:
    ops = re.findall(r"(%\w+) = Op(?:FAdd|FSub|FMul|FDiv) ", text)
    marked = set(re.findall(r"OpDecorate (%\w+) NoContraction", text))
    return bool(ops) and set(ops) <= marked


def test_every_float_add_and_multiply_is_never_contracted() -> None:
    for name in ("gemm_f32", "gemm_epilogue", "gemm_tiled"):
        assert uncontracted(emit(example(name).make(8, 8, 8).kernel)), name
    assert uncontracted(emit(binary_kernel(ElemType.F64)[0]))
    assert uncontracted(emit(named("gemm_f32-Bf16x3_operands-sg32-f16")))  # the FragAdds too


def test_barriers_are_workgroup_scoped_acquire_release_of_workgroup_memory() -> None:
    text = emit(example("gemm_tiled").make(32, 32, 32).kernel)
    barriers = re.findall(r"OpControlBarrier (%\w+) (%\w+) (%\w+)", text)
    assert barriers and set(barriers) == {("%c_u32_2", "%c_u32_2", "%c_u32_264")}
    assert re.search(r"OpLoad %\w+ %\w+ NonPrivatePointer", text)  # shared reads are ordered


def test_the_module_declares_the_vulkan_memory_model_and_the_storage_it_uses() -> None:
    text = emit(example("gemm_f16").make(8, 8, 8).kernel)
    assert "OpMemoryModel Logical Vulkan" in text
    assert "OpCapability StorageBuffer16BitAccess" in text
    assert "OpCapability StorageBuffer8BitAccess" not in text
    assert "PushConstant" in text and re.search(r"OpDecorate %\d+_a Binding 0\n", text)
    bf16 = emit(named("gemm_f32-Bf16_operands-sg32-f16"))
    assert "OpCapability BFloat16CooperativeMatrixKHR" in bf16
    assert 'OpExtension "SPV_KHR_bfloat16"' in bf16


def constants(binary: bytes) -> set[int]:
    """The literal words of every OpConstant in a SPIR-V binary (64-bit ones joined)."""
    words = np.frombuffer(binary, np.uint32)
    found, i = set(), 5
    while i < words.size:
        count, opcode = int(words[i]) >> 16, int(words[i]) & 0xFFFF
        if opcode == 43:  # OpConstant: type, id, value words
            value = words[i + 3:i + count]
            found.add(int(value[0]) | (int(value[1]) << 32 if value.size > 1 else 0))
        i += count
    return found


@pytest.mark.parametrize("t, values", [
    (ElemType.F32, [float("nan"), float("inf"), float("-inf"), -0.0, 1e-45, 3.4e38]),
    (ElemType.F64, [float("nan"), float("-inf"), -0.0, 5e-324, 1e300]),
    (ElemType.F16, [float("inf"), -0.0, 2.0**-24, 65504.0]),
])
def test_float_constants_assemble_to_their_exact_bits(t: ElemType, values: list[float]) -> None:
    body = tuple(ir.Store(array="out", index=ir.Const(value=i, type=ElemType.I32),
                          value=ir.Const(value=v, type=t)) for i, v in enumerate(values))
    kernel = ir.Kernel(name="consts", params=(ir.ArrayParam(name="out", elem=t),), body=body)
    dtype = np.dtype({ElemType.F16: np.float16, ElemType.F32: np.float32,
                      ElemType.F64: np.float64}[t])
    want = {int(np.array([v], dtype).view(f"u{dtype.itemsize}")[0]) for v in values}
    assert want <= constants(assemble(emit(kernel)))


def test_a_bf16_constant_is_its_pattern_rounded_once() -> None:
    # 1 + 2^-8 + 2^-30 rounds up to 1 + 2^-7 in one rounding (through f32 it would tie to 1)
    value = 1 + 2.0**-8 + 2.0**-30
    kernel = ir.Kernel(name="k", params=(ir.ArrayParam(name="out", elem=ElemType.BF16),),
                       body=(ir.Store(array="out", index=ir.Const(value=0, type=ElemType.I32),
                                      value=ir.Const(value=value, type=ElemType.BF16)),))
    assert 0x3F81 in constants(assemble(emit(kernel)))


# ----------------------------------------------------------------- planted printer errors


def test_swapped_layouts_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    printer = importlib.import_module("backends.spirv.emit")
    kernel = named("gemm_i32-Int32_byte_planes-sg32-f16")
    monkeypatch.setattr(printer, "LAYOUT", {FragLayout.ROW: 1, FragLayout.COL: 0})
    assert not layouts_printed_as_lowered(kernel, emit_module(kernel))


def test_a_dropped_no_contraction_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    printer = importlib.import_module("backends.spirv.emit")
    monkeypatch.setattr(printer._Module, "exact", printer._Module.op)
    assert not uncontracted(emit(example("gemm_f32").make(8, 8, 8).kernel))


# ----------------------------------------------------------------- the lowering check


def frag_kernel(*stmts: ir.Stmt, arrays: tuple[ir.ArrayParam, ...] = (), subgroup: int = 32
                ) -> ir.Kernel:
    return ir.Kernel(name="k", params=arrays, body=stmts, subgroup=subgroup)


F16, F32, I32 = ElemType.F16, ElemType.F32, ElemType.I32


def decl(name: str, use: FragUse, elem: ElemType, m: int = 16, n: int = 16, k: int = 16
         ) -> ir.FragDecl:
    return ir.FragDecl(name=name, use=use, shape=ir.FragShape(m=m, n=n, k=k), elem=elem)


def c(v: int) -> ir.Const:
    return ir.Const(value=v, type=I32)


def test_an_integer_fragment_add_is_one_op_iadd_of_two_cooperative_matrices() -> None:
    kernel = frag_kernel(
        *(decl(n, FragUse.ACCUMULATOR, I32) for n in ("x", "y", "z")),
        ir.FragFill(frag="x", value=c(1)), ir.FragFill(frag="y", value=c(2)),
        ir.FragAdd(d="z", a="x", b="y"),
        ir.FragStore(frag="z", array="out", offset=c(0), stride=c(16)),
        arrays=(ir.ArrayParam(name="out", elem=I32),))
    text = emit(kernel)
    check(text)
    assert len(re.findall(r"= OpIAdd %cm_acc_i32_16x16 ", text)) == 1


def test_the_lowered_kernel_keeps_its_fragments_whole() -> None:
    kernel = named("gemm_f16-F16_operands-sg32-f16")
    assert lower(kernel) == kernel
    assert print_kernel(lower(kernel)) == emit(kernel)


def test_lane_explicit_statements_are_refused() -> None:
    from backends.cuda import lower as cuda_lower

    kernel = cuda_lower.lower(named("gemm_f16-F16_operands-sg32-f16"))
    with pytest.raises(EmitError, match=r"SPIR-V has no (mma|ldmatrix) statement: "):
        sarek.emit(kernel, "spirv")


def test_a_misaligned_stride_is_refused() -> None:
    kernel = frag_kernel(decl("fa", FragUse.A, F16), ir.FragLoad(
        frag="fa", array="a", offset=c(0), stride=c(20)),
        arrays=(ir.ArrayParam(name="a", elem=F16),))
    with pytest.raises(EmitError, match="not provably a multiple of 16 bytes"):
        sarek.emit(kernel, "spirv")


def test_an_f32_operand_fragment_is_refused() -> None:
    with pytest.raises(EmitError, match="take f16, bf16, u8, i8 components"):
        sarek.emit(frag_kernel(decl("fa", FragUse.A, F32)), "spirv")


def test_a_multiply_add_whose_types_do_not_pair_is_refused() -> None:
    kernel = frag_kernel(decl("fa", FragUse.A, F16), decl("fb", FragUse.B, F16),
                         decl("acc", FragUse.ACCUMULATOR, I32),
                         ir.FragMulAdd(d="acc", a="fa", b="fb", c="acc"))
    with pytest.raises(EmitError, match="f16 x f16 into i32"):
        sarek.emit(kernel, "spirv")


def test_a_fragment_that_does_not_spread_over_the_subgroup_is_refused() -> None:
    with pytest.raises(EmitError, match="cannot be spread evenly over 64 lanes"):
        sarek.emit(frag_kernel(decl("fa", FragUse.A, F16, m=4, k=8), subgroup=64), "spirv")


def test_f64_transcendentals_are_refused_with_the_reason() -> None:
    x = ir.Load(array="a", index=c(0), type=ElemType.F64)
    kernel = ir.Kernel(name="k", params=(ir.ArrayParam(name="a", elem=ElemType.F64),), body=(
        ir.Store(array="a", index=c(0), value=ir.Call(fn=ir.MathFn.EXP, args=(x,),
                                                      type=ElemType.F64)),))
    with pytest.raises(EmitError, match="16- and 32-bit floats only"):
        sarek.emit(kernel, "spirv")
