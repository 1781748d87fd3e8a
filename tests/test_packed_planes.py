"""Packed stores (``StorePacked``, ``specs/ir.md``) and the byte planes staged with them: one
store of a wider value into consecutive elements, least significant first, as the simulator
runs it and each target prints it; and the rewrite's packed staging of byte planes, bit for bit
the unpacked one's result (``specs/matrix-pattern-rewrite.md`` 6.6)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import example
from test_matrix_rewrite import bits, original

import sarek
from backends.cuda import compile_cubin, nvrtc_available
from backends.metal.check import clang_unavailable, syntax_check
from backends.opencl import opencl_available
from backends.opencl import run as opencl_run
from backends.registry import target
from backends.spirv import check as spirv_check
from backends.spirv import emit as spirv_emit
from backends.spirv import tools_reason
from sarek import ir, ir_check, packed_store
from sarek.errors import IRError, OutOfBounds, SharedRace
from sarek.ir import Builtin, ElemType, MemSpace
from sarek.ir_build import add, const, mul, var
from sarek.ir_walk import walk
from sarek.launch import Launch
from sarek.matrix_rewrite import rewrite_launch
from sarek.matrix_scheme import Lowering
from sarek.schedule import SEED, Schedule
from sarek.staging import Staging

E = ElemType
THREADS, BYTES = 32, 4
TID = ir.BuiltinValue(which=Builtin.THREAD_IDX_X)


def packing_kernel(index: ir.Expr | None = None, value_type: ElemType = E.U32,
                   elem: ElemType = E.U8) -> ir.Kernel:
    """Thread ``t`` stores word ``w[t]`` packed into shared ``s[4t ..]``; after a barrier it
    copies its own four elements to ``out``."""
    count = value_type.bits // elem.bits
    at = index if index is not None else mul(var("t"), const(count))
    out_at = add(mul(var("t"), const(count)), var("i"))
    return ir.Kernel(name="packing", params=(
        ir.ArrayParam(name="out", elem=elem),
        ir.ArrayParam(name="w", elem=value_type, readonly=True)), body=(
        ir.ArrayDecl(name="s", elem=elem, size=THREADS * count, space=MemSpace.SHARED),
        ir.Let(name="t", type=E.I32, value=TID),
        ir.StorePacked(array="s", index=at,
                       value=ir.Load(array="w", index=var("t"), type=value_type)),
        ir.Barrier(),
        ir.For(var="i", start=const(0), stop=const(count), step=const(1), body=(
            ir.Store(array="out", index=out_at,
                     value=ir.Load(array="s", index=out_at, type=elem)),))),
        block=(THREADS, 1, 1))


WORDS = (np.arange(THREADS, dtype=np.uint32) * np.uint32(0x01030507) + np.uint32(0x8A0B0C0D))


def args() -> dict[str, np.ndarray]:
    return {"out": np.zeros(THREADS * BYTES, np.uint8), "w": WORDS.copy()}


# ------------------------------------------------------------------ the statement


def test_a_packed_store_writes_the_elements_least_significant_first() -> None:
    out = sarek.simulate(packing_kernel(), args(), grid=1, block=THREADS)["out"]
    assert np.array_equal(out, WORDS.astype("<u4").view(np.uint8))


def test_a_packed_store_of_u64_into_u16_elements_writes_four_of_them() -> None:
    words = np.arange(THREADS, dtype=np.uint64) * np.uint64(0x0102030405060708) + np.uint64(9)
    out = sarek.simulate(packing_kernel(value_type=E.U64, elem=E.U16),
                         {"out": np.zeros(THREADS * 4, np.uint16), "w": words},
                         grid=1, block=THREADS)["out"]
    assert np.array_equal(out, words.astype("<u8").view(np.uint16))


def test_element_stores_of_a_packed_store_are_the_same_writes() -> None:
    split = packed_store.elements(packing_kernel())
    assert not any(isinstance(s, ir.StorePacked) for s in walk(split.body))
    got = sarek.simulate(split, args(), grid=1, block=THREADS)["out"]
    assert np.array_equal(got, sarek.simulate(packing_kernel(), args(), grid=1,
                                              block=THREADS)["out"])


def test_a_misaligned_packed_store_is_refused_by_the_simulator() -> None:
    kernel = packing_kernel(index=add(mul(var("t"), const(BYTES)), const(2)))
    with pytest.raises(OutOfBounds, match="packed store of 4 elements at element 2 of 's' is "
                                          "not aligned to 4 elements"):
        sarek.simulate(kernel, args(), grid=1, block=THREADS)


def test_a_packed_store_past_the_end_is_out_of_bounds() -> None:
    kernel = packing_kernel(index=mul(add(var("t"), const(1)), const(BYTES)))
    with pytest.raises(OutOfBounds):
        sarek.simulate(kernel, args(), grid=1, block=THREADS)


def test_packed_stores_of_two_threads_to_one_element_race() -> None:
    kernel = packing_kernel(index=const(0))  # every thread writes s[0 .. 3]
    with pytest.raises(SharedRace):
        sarek.simulate(kernel, args(), grid=1, block=THREADS)


@pytest.mark.parametrize(("value_type", "elem", "why"), [
    (E.I32, E.U8, "takes an unsigned integer 2, 4 or 8 times as wide, not i32"),
    (E.U8, E.U8, "not u8"),
    (E.U32, E.U32, "not u32"),
    (E.U32, E.BOOL, "not u32"),
], ids=["signed", "one-element", "same-width", "bool-array"])
def test_the_checker_refuses_a_value_that_does_not_pack(value_type: ElemType, elem: ElemType,
                                                         why: str) -> None:
    with pytest.raises(IRError, match=why):
        ir_check.ensure_valid(packing_kernel(value_type=value_type, elem=elem)
                              if elem is not E.BOOL else _into(E.BOOL, value_type))


def _into(elem: ElemType, value_type: ElemType) -> ir.Kernel:
    return ir.Kernel(name="k", params=(ir.ArrayParam(name="w", elem=value_type),), body=(
        ir.ArrayDecl(name="s", elem=elem, size=64, space=MemSpace.SHARED),
        ir.StorePacked(array="s", index=const(0),
                       value=ir.Load(array="w", index=const(0), type=value_type))))


# f16 and f32 bit patterns that a numeric conversion would change: NaNs with payloads and
# both signs, -0.0, infinities, subnormals
F16_BITS = np.array([0x7E01, 0xFC00, 0x8000, 0x0001, 0xFE7F, 0x7C00, 0x3C00, 0x83FF] * 16,
                    np.uint16)
F32_BITS = np.array([0x7FC00001, 0xFF800000, 0x80000000, 0x00000001] * 16, np.uint32)


@pytest.mark.parametrize(("elem", "value_type", "patterns"), [
    (E.F16, E.U64, F16_BITS), (E.F32, E.U64, F32_BITS), (E.F16, E.U32, F16_BITS)],
    ids=["f16-u64", "f32-u64", "f16-u32"])
def test_a_packed_store_into_a_float_array_writes_each_parts_bits(
        elem: ElemType, value_type: ElemType, patterns: np.ndarray) -> None:
    words = patterns.view(f"<u{value_type.bits // 8}")[:THREADS].copy()
    kernel = packing_kernel(value_type=value_type, elem=elem)
    host = {"out": np.zeros(words.nbytes // patterns.itemsize, patterns.dtype).view(
        sarek.dtypes.numpy_dtype(elem)), "w": words}
    out = sarek.simulate(kernel, host, grid=1, block=THREADS)["out"]
    assert np.array_equal(out.view(patterns.dtype), patterns[:out.size])
    split = sarek.simulate(packed_store.elements(kernel), host, grid=1, block=THREADS)["out"]
    assert np.array_equal(split.view(patterns.dtype), patterns[:out.size])


def test_the_checker_refuses_a_packed_store_into_a_read_only_array() -> None:
    kernel = ir.Kernel(name="k", params=(ir.ArrayParam(name="a", elem=E.U8, readonly=True),),
                       body=(ir.StorePacked(array="a", index=const(0),
                                            value=const(7, E.U32)),))
    with pytest.raises(IRError, match="store to read-only array 'a'"):
        ir_check.ensure_valid(kernel)


# ------------------------------------------------------------------ the targets


@pytest.mark.skipif(nvrtc_available() is not None, reason=f"NVRTC: {nvrtc_available()}")
def test_cuda_prints_one_store_through_a_wider_pointer_and_nvrtc_compiles_it() -> None:
    src = sarek.emit(packing_kernel(), "cuda")
    assert "*((unsigned*)&s[" in src
    assert compile_cubin(src, "sm_80")[:4] == b"\x7fELF"


@pytest.mark.skipif(opencl_available() is not None, reason=f"OpenCL: {opencl_available()}")
def test_opencl_runs_the_packed_store_as_the_simulator_does() -> None:
    src = sarek.emit(packing_kernel(), "opencl")
    assert "*((__local uint*)&s[" in src
    got = opencl_run(packing_kernel(), args(), (1, 1, 1), (THREADS, 1, 1))["out"]
    assert np.array_equal(got, sarek.simulate(packing_kernel(), args(), grid=1,
                                              block=THREADS)["out"])


@pytest.mark.skipif(clang_unavailable() is not None, reason=f"clang: {clang_unavailable()}")
def test_metal_prints_a_threadgroup_pointer_that_clang_accepts() -> None:
    src = sarek.emit(packing_kernel(), "metal")
    assert "*((threadgroup uint*)&s[" in src
    syntax_check(src, "packing.metal")


@pytest.mark.skipif(tools_reason() is not None, reason=f"SPIR-V tools: {tools_reason()}")
def test_spirv_writes_the_parts_one_element_at_a_time_and_validates() -> None:
    text = spirv_emit(packing_kernel())
    assert text.count("OpStore") >= BYTES  # the four parts (logical addressing)
    spirv_check(text)


# ------------------------------------------------------------------ packed byte planes

PACKED = Staging(narrow_b_col_major=True, packed_planes=True)
UNPACKED = Staging(narrow_b_col_major=True)
SIZE = (150, 133, 70)  # ragged tiles, a partial last step
FROM_REGISTERS = [SEED, Schedule(prefetch=True), Schedule(step=32),
                  Schedule(step=32, prefetch=True), Schedule(step=48)]


def byte_planes(staging: Staging, schedule: Schedule, subgroup: int = 32,
                frag: int = 16) -> Launch:
    launch = example("gemm_i32").make(*SIZE, seed=7)  # int32 over the full range
    return rewrite_launch(launch, lowering=Lowering.INT32_BYTE_PLANES, staging=staging,
                          schedule=schedule, subgroup=subgroup, frag=frag).launch


def packed_stores(kernel: ir.Kernel) -> list[ir.StorePacked]:
    return [s for s in walk(kernel.body) if isinstance(s, ir.StorePacked)]


@pytest.mark.parametrize("schedule", FROM_REGISTERS, ids=lambda s: s.name)
@pytest.mark.parametrize(("subgroup", "frag"), [(32, 16), (64, 8)])
def test_packed_byte_planes_give_the_originals_bits(schedule: Schedule, subgroup: int,
                                                    frag: int) -> None:
    launch = example("gemm_i32").make(*SIZE, seed=7)
    rw = byte_planes(PACKED, schedule, subgroup, frag)
    assert packed_stores(rw.kernel)
    assert np.array_equal(bits(rw.simulate()["c"]), bits(original(launch)))


@pytest.mark.parametrize("schedule", [SEED, Schedule(step=32, prefetch=True)],
                         ids=lambda s: s.name)
def test_packed_byte_planes_lowered_for_cuda_give_the_originals_bits(
        schedule: Schedule) -> None:
    launch = example("gemm_i32").make(*SIZE, seed=7)
    rw = rewrite_launch(launch, staging=target("cuda").staging, schedule=schedule).launch
    assert packed_stores(rw.kernel)
    lowered = sarek.simulate(rw.kernel, dict(rw.args), grid=rw.grid, block=rw.block,
                             target="cuda", arith="h200")
    assert np.array_equal(bits(lowered["c"]), bits(original(launch)))


def test_each_plane_of_a_group_of_four_k_is_one_packed_store() -> None:
    rw = byte_planes(PACKED, SEED)
    planes = {s.name for s in walk(rw.kernel.body)
              if isinstance(s, ir.ArrayDecl) and s.elem is E.U8}
    stores = packed_stores(rw.kernel)
    assert {s.array for s in stores} == planes == {f"sk_{x}_{p}" for x in "ab"
                                                   for p in ("p0", "p1", "p2", "p3")}
    assert all(s.value.type is E.U32 for s in stores)
    plain = [s for s in walk(rw.kernel.body) if isinstance(s, ir.Store) and s.array in planes]
    assert plain == []


def test_planes_are_stored_element_by_element_without_the_policy_or_column_major_b() -> None:
    assert packed_stores(byte_planes(UNPACKED, SEED).kernel) == []
    assert packed_stores(byte_planes(Staging(packed_planes=True), SEED).kernel) == []


def test_pipelined_schedules_convert_raw_tiles_element_by_element() -> None:
    assert packed_stores(byte_planes(PACKED, Schedule(stages=3)).kernel) == []
