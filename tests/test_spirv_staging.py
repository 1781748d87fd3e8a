"""How the SPIR-V printer stages tiles, without a GPU: the pipelined schedules' staged copies
move 16-byte words (``uvec4`` loads from a second view of the storage buffer, held in registers
until the ``StageWait`` that lands them, stored as words into workgroup arrays of words that
cooperative-matrix loads read at word offsets and strides); 32-bit raw tiles are read one
component at a time; the byte planes accumulate in u32; Vulkan's policy stays inside what the
H200 reports. Every such module passes ``spirv-val``, and the simulator running the SPIR-V
lowering gives CUDA's lowering's bits."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from conftest import example
from staged_tile_cases import TILES, staged_planes_kernel, staged_tile_kernel

from backends.pipeline import Compiled, compile_launch
from backends.registry import target
from backends.spirv import check, emit, tools_reason
from backends.spirv.converting import converting_copies
from backends.spirv.copies import transposed
from backends.spirv.device import unsupported_configs
from backends.spirv.emit import print_kernel
from backends.spirv.lower import (
    STAGING,
    lower,
    quad_arrays,
    staged_copies,
)
from sarek import ir
from sarek.device_support import recorded_h200_vulkan
from sarek.dtypes import numpy_dtype
from sarek.ir import ElemType
from sarek.ir_walk import shared_arrays, walk
from sarek.launch import Launch
from sarek.matrix_rewrite import rewrite_launch
from sarek.matrix_scheme import Lowering
from sarek.schedule import Schedule
from sarek.staging import Staging, StagingError
from sim import simulate

pytestmark = [pytest.mark.skipif(tools_reason() is not None,
                                 reason=f"SPIRV-Tools unavailable: {tools_reason()}"),
              pytest.mark.usefixtures("h200_vulkan")]  # Vulkan's policy as the H200 gates it

EXAMPLES = {Lowering.F16_OPERANDS: "gemm_f16", Lowering.BF16_OPERANDS: "gemm_f32",
            Lowering.BF16X3_OPERANDS: "gemm_f32", Lowering.INT8_OPERANDS: "gemm_i8",
            Lowering.INT32_BYTE_PLANES: "gemm_i32"}
RAGGED = (150, 133, 70)  # edge tiles, a k that is no multiple of 8: the word-by-word path


def compiled(lowering: Lowering, schedule: str | None, size: tuple[int, int, int] = RAGGED,
             on: str = "spirv") -> Compiled:
    launch = example(EXAMPLES[lowering]).make(*size)
    return compile_launch(target(on), launch, lowering=lowering,
                          schedule=None if schedule is None else Schedule.parse(schedule))


def rewritten(lowering: Lowering, schedule: str | None, size: tuple[int, int, int] = RAGGED,
              on: str = "spirv") -> Launch:
    """The GEMM's launch (after the conversion pre-pass, where one runs first)."""
    return compiled(lowering, schedule, size, on).launch


def converting(lowering: Lowering, schedule: str, on: str = "spirv") -> Launch:
    """The one kernel that converts f32 operands as it stages them (``rewrite_launch``, no
    pre-pass): what Vulkan's lowering fuses into converting copies."""
    launch = example(EXAMPLES[lowering]).make(*RAGGED)
    return rewrite_launch(launch, target=target(on), lowering=lowering,
                          schedule=Schedule.parse(schedule)).launch


def same_bits(ours: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> bool:
    return all(np.array_equal(ours[k].view(f"u{ours[k].itemsize}"),
                              want[k].view(f"u{want[k].itemsize}")) for k in want)


def same_bits_as_cuda(lowering: Lowering, schedule: str) -> bool:
    ours, cuda = compiled(lowering, schedule), compiled(lowering, schedule, on="cuda")
    return same_bits(ours.steps.simulate(target="spirv"), cuda.steps.simulate(target="cuda"))


def sim_simulate(lowered: ir.Kernel, launch: Launch) -> dict[str, np.ndarray]:
    """``lowered`` (a kernel as the SPIR-V lowering gives it) run as it is, under the H200's
    arithmetic."""
    return simulate(lowered, dict(launch.args), launch.grid, launch.block, arith="h200")


def converting_gives_cudas_bits(lowering: Lowering, schedule: str) -> bool:
    ours, cuda = converting(lowering, schedule), converting(lowering, schedule, on="cuda")
    return same_bits(ours.simulate(target="spirv"), cuda.simulate(target="cuda"))


POLICY = [(Lowering(name), schedule.name) for name, schedule in STAGING.large]


@pytest.mark.parametrize(("lowering", "schedule"), POLICY, ids=[f"{low}-{s}" for low, s in POLICY])
def test_each_large_schedule_of_the_policy_validates_and_gives_cudas_bits(
        lowering: Lowering, schedule: str) -> None:
    check(emit(rewritten(lowering, schedule).kernel))
    assert same_bits_as_cuda(lowering, schedule)


@pytest.mark.parametrize(("lowering", "schedule"), POLICY, ids=[f"{low}-{s}" for low, s in POLICY])
def test_each_large_schedule_of_the_policy_fits_the_h200s_vulkan(lowering: Lowering,
                                                                  schedule: str) -> None:
    launch = rewritten(lowering, None, (1024, 1024, 64), on="vulkan")
    assert schedule in launch.kernel.name
    kernel = lower(launch.kernel)
    shared = sum(a.size * numpy_dtype(a.elem).itemsize for a in shared_arrays(kernel)
                 if a.shares is None)
    assert shared <= 49152 and math.prod(launch.block) <= 1024
    assert unsupported_configs(kernel, recorded_h200_vulkan()) == []


def test_the_byte_planes_give_cudas_bits_through_u32_accumulators() -> None:
    assert same_bits_as_cuda(Lowering.INT32_BYTE_PLANES, "t64k32")
    kernel = lower(rewritten(Lowering.INT32_BYTE_PLANES, "t64k32").kernel)
    accs = {s.elem for s in walk(kernel.body)
            if isinstance(s, ir.FragDecl) and s.use is ir.FragUse.ACCUMULATOR}
    assert accs == {ElemType.U32}


def test_pipelined_f16_tiles_are_arrays_of_words() -> None:
    kernel = lower(rewritten(Lowering.F16_OPERANDS, "t128k32s2").kernel)
    assert quad_arrays(kernel) == {"sk_a", "sk_b"}
    text = emit(kernel)
    # 128 rows of 32 + 8 f16 (640 words); 32 rows of 128 + 8 (544 words), two stages each
    assert re.search(r"%\w+_sk_a = OpVariable %p_wo_arr_v4u32_1280 Workgroup", text)
    assert re.search(r"%\w+_sk_b = OpVariable %p_wo_arr_v4u32_1088 Workgroup", text)
    # fragments read at word strides: 40 / 8 and 136 / 8
    strides = set(re.findall(r"OpCooperativeMatrixLoadKHR %\w+ %\w+ %c_u32_0 (%\w+)", text))
    assert strides == {"%c_i32_5", "%c_i32_17"}


def test_words_are_loaded_through_a_second_view_of_the_same_binding() -> None:
    text = emit(lower(rewritten(Lowering.F16_OPERANDS, "t128k32s2").kernel))
    for name, binding in (("a", 0), ("b", 1)):
        view = re.search(rf"(%\d+_{name}_words) = OpVariable %p_st_buffer_v4u32 StorageBuffer",
                         text)
        assert view is not None
        assert f"OpDecorate {view[1]} Binding {binding}" in text
        assert f"OpDecorate {view[1]} NonWritable" in text
    assert "OpDecorate %rta_v4u32 ArrayStride 16" in text


def test_words_crossing_the_limits_are_packed_by_one_loop_the_driver_is_asked_not_to_unroll(
        ) -> None:
    text = emit(lower(rewritten(Lowering.F16_OPERANDS, "t128x256k16s2").kernel))
    loops = re.findall(r"OpLoopMerge %\w+_edge_end %\w+ DontUnroll", text)
    element_loads = re.findall(r"= OpAccessChain %p_st_f16 %\d+_[ab] ", text)
    # one word of A and two of B per invocation, in the prologue and in the loop: each word
    # that crosses the limits loads its eight elements through one load in one loop
    assert len(loops) == len(element_loads) == 6


def test_a_loops_trips_inside_the_limits_come_first_with_their_copies_unchecked() -> None:
    text = emit(lower(rewritten(Lowering.F16_OPERANDS, "t128x256k16s2").kernel))
    check(text)
    loops = [m.start() for m in re.finditer(r"OpLoopMerge %\d+_for_end ", text)]
    fast, slow = text[loops[0]:loops[1]], text[loops[1]:]
    # one 16-byte load of A and two of B per invocation and trip, with no test of the limits
    # between them: the loop runs while the trip's tiles all lie inside them
    assert len(re.findall(r"OpAccessChain %p_st_v4u32 %\d+_[ab]_words ", fast)) == 3
    assert "_tile_edge" not in fast and "DontUnroll" not in fast
    # the second loop takes over from the first trip that is not: the loop as it was
    assert slow.count("_tile_edge = OpLabel") == 2
    assert len(re.findall(r"OpLoopMerge %\w+_edge_end %\w+ DontUnroll", slow)) == 3
    first = re.search(r"(%\d+_sk_k0) = OpVariable", text)
    assert first is not None and text.count(f"OpStore {first[1]} ") == 3  # start, each next


@pytest.mark.parametrize("strided", [False, True], ids=["rows", "strided"])
@pytest.mark.parametrize("elem", list(TILES), ids=str)
def test_a_staged_tile_of_each_element_type_validates(elem: ElemType, strided: bool) -> None:
    kernel = lower(staged_tile_kernel(elem, strided))
    assert quad_arrays(kernel) == {"tile"}
    check(emit(kernel))


def test_copies_are_held_until_the_wait_that_lands_them() -> None:
    kernel = lower(rewritten(Lowering.F16_OPERANDS, "t128k32s2").kernel)
    kinds = [type(s).__name__ for s in walk(kernel.body)
             if isinstance(s, ir.StageCopy | ir.StageCommit | ir.StageWait)]
    assert kinds.count("StageWait") == 2 and kinds.count("StageCopy") == 4
    text = emit(kernel)
    body = text[text.index("%entry = OpLabel"):]
    first_load = body.index("OpLoad %v4u32")
    first_word_store = re.search(r"OpStore %\d+ %\d+ NonPrivatePointer", body)
    assert first_word_store is not None
    # the prologue's words are held: the first one lands at the loop's wait, after the loads
    held = set(re.findall(r"(%\d+_sk_[ab]_held) = OpVariable", text))
    assert len(held) == 4 + 4  # four words of A and four of B per invocation
    assert first_load < first_word_store.start()


def test_a_schedule_that_fits_only_with_the_exchange_in_a_tile_keeps_its_padding() -> None:
    # 128x256 in three 16-deep stages: 50.75 KiB padded with an exchange array of its own,
    # 42.75 KiB with the exchange array in sk_a's bytes
    launch = rewritten(Lowering.F16_OPERANDS, "t128x256k16s3", on="vulkan")
    kernel = lower(launch.kernel)
    decls = {a.name: a for a in shared_arrays(kernel)}
    assert decls["sk_a"].size == 3 * 128 * (16 + 8) and decls["sk_b"].size == 3 * 16 * (256 + 8)
    assert decls["sk_cs"].shares == "sk_a"
    assert sum(a.size * numpy_dtype(a.elem).itemsize for a in shared_arrays(kernel)
               if a.shares is None) <= 49152
    check(emit(kernel))
    assert same_bits_as_cuda(Lowering.F16_OPERANDS, "t128x256k16s3")


def test_a_schedule_that_fits_only_unpadded_stages_a_unpadded_and_gives_cudas_bits() -> None:
    # Bf16x3 in three 16-deep stages: 51.25 KiB with A's rows padded, 42.25 KiB without; no
    # term array of the neutral rewrite has room for the exchange array
    kernel = lower(rewritten(Lowering.BF16X3_OPERANDS, "t64k16s3", on="vulkan").kernel)
    sizes = declared(kernel)
    assert sizes["sk_a_hi"] == 3 * 64 * 16 and sizes["sk_b_hi"] == 3 * 16 * (64 + 8)
    assert all(a.shares is None for a in shared_arrays(kernel))
    check(emit(kernel))
    assert same_bits_as_cuda(Lowering.BF16X3_OPERANDS, "t64k16s3")


def test_a_schedule_that_fits_padded_keeps_its_padding() -> None:
    kernel = lower(rewritten(Lowering.F16_OPERANDS, "t128x256k16s2", on="vulkan").kernel)
    assert {a.name: a.size for a in shared_arrays(kernel)}["sk_a"] == 2 * 128 * (16 + 8)


def test_copies_are_held_as_many_groups_deep_as_a_wait_leaves_pending() -> None:
    # three stages: each step waits with one group pending, so two steps' words are held
    kernel = lower(rewritten(Lowering.F16_OPERANDS, "t128k16s3").kernel)
    assert {s.pending for s in walk(kernel.body) if isinstance(s, ir.StageWait)} == {0, 1}
    text = emit(kernel)
    check(text)
    held = set(re.findall(r"(%\d+_sk_[ab]_held) = OpVariable", text))
    assert len(held) == 2 * (2 + 2)  # two sets of two words of A and two of B
    # the loop is printed two steps a trip (the second behind a test of the bound), so that
    # each copy printed has its own set of registers; twice, its trips inside the limits first
    assert text.count("_trip = OpLabel") == 2
    assert text.count("OpCooperativeMatrixMulAddKHR") == 2 * 2 * 16


def test_each_wait_of_a_loop_printed_two_steps_a_trip_lands_one_set_known_as_printed() -> None:
    # the loads of the group left pending stay in flight across the wait: no store of its
    # registers there, not even one its group would skip as the kernel runs
    text = emit(lower(rewritten(Lowering.F16_OPERANDS, "t128k16s3").kernel))
    start = re.search(r"OpLoopMerge %\d+_for_end ", text)  # the reduction loop
    assert start is not None
    loop = text[start.start():text.index("_for_end = OpLabel")]
    # what each step lands at its wait: after the last step's products, before its barrier
    waits = [step.split("OpCooperativeMatrixMulAddKHR")[-1]
             for step in loop.split("OpControlBarrier")[:-1]]
    landed = [set(re.findall(r"= OpLoad %v4u32 (%\d+_sk_[ab]_held)", w)) for w in waits]
    assert len(landed) == 2 and landed[0] and landed[1] and not landed[0] & landed[1]
    assert not re.search(r"OpLoad %i32 %\d+_sk_[ab]_group", loop)


def test_copies_are_held_one_group_deep_where_every_wait_leaves_none_pending() -> None:
    text = emit(lower(rewritten(Lowering.F16_OPERANDS, "t128k32s2").kernel))
    assert "_trip = OpLabel" not in text and "_group = OpVariable" not in text


def test_32_bit_tiles_are_words_read_one_component_at_a_time() -> None:
    # the raw f32 tiles as the neutral rewrite stages them, before the lowering fuses them
    kernel = staged_copies(converting(Lowering.BF16_OPERANDS, "t64k32s2").kernel)
    assert quad_arrays(kernel) == {"sk_ra", "sk_rb"}  # the bf16 terms are stored element-wise
    text = print_kernel(kernel)
    assert re.search(r"= OpAccessChain %p_wo_u32 %\w+_sk_ra %\d+ %\d+", text)


def declared(kernel: ir.Kernel) -> dict[str, int]:
    return {a.name: a.size for a in shared_arrays(kernel)}


def test_tiles_a_lowering_converts_are_copied_as_their_terms() -> None:
    kernel = lower(converting(Lowering.BF16_OPERANDS, "t64k32s2").kernel)
    # no raw f32 arrays; the bf16 terms have a buffer per stage: 64 rows of 32 + 8, 32 of 64 + 8
    assert declared(kernel) == {"sk_a": 2 * 64 * 40, "sk_b": 2 * 32 * 72, "sk_cs": 4 * 256}
    parts = {(s.dst, s.part) for s in walk(kernel.body) if isinstance(s, ir.StageCopy)}
    bf16 = ir.CopyPart(into=ElemType.BF16, index=0)
    assert parts == {("sk_a", bf16), ("sk_b", bf16)}
    assert quad_arrays(kernel) == {"sk_a", "sk_b"}
    loop = next(s for s in kernel.body if isinstance(s, ir.For))
    assert sum(isinstance(s, ir.Barrier) for s in loop.body) == 1  # the conversion's went
    check(emit(kernel))
    assert converting_gives_cudas_bits(Lowering.BF16_OPERANDS, "t64k32s2")


def test_raw_tiles_used_otherwise_than_the_rewrite_uses_them_are_left_raw() -> None:
    kernel = converting(Lowering.BF16_OPERANDS, "t64k32s2").kernel
    loop = next(s for s in kernel.body if isinstance(s, ir.For))
    converts = [i for i, s in enumerate(loop.body) if isinstance(s, ir.For)]
    # the barrier after the conversion loops moved before them: fusing could not drop it
    barrier = converts[-1] + 1
    body = list(loop.body)
    body.insert(converts[0], body.pop(barrier))
    moved = kernel.model_copy(update={"body": tuple(
        loop.model_copy(update={"body": tuple(body)}) if s is loop else s
        for s in kernel.body)})
    assert converting_copies(moved) == moved
    assert converting_copies(kernel) != kernel


def test_the_three_bf16x3_terms_land_from_one_set_of_loaded_words() -> None:
    kernel = lower(rewritten(Lowering.BF16X3_OPERANDS, "t64k16s2").kernel)
    parts = {(s.dst, s.part.index) for s in walk(kernel.body)
             if isinstance(s, ir.StageCopy) and s.part is not None}
    assert parts == {(f"sk_{x}_{t}", i) for x in "ab" for i, t in enumerate(("hi", "mid", "lo"))}
    text = emit(kernel)
    check(text)
    # a 64x16 f32 tile is 128 words of bf16 per term, one per invocation: two f32 words each
    held = set(re.findall(r"(%\d+_sk_\w+_held) = OpVariable", text))
    assert len(held) == 2 + 2
    assert same_bits_as_cuda(Lowering.BF16X3_OPERANDS, "t64k16s2")


def test_byte_planes_are_copied_as_their_four_planes() -> None:
    kernel = lower(rewritten(Lowering.INT32_BYTE_PLANES, "t64k32s2").kernel)
    planes = {(s.dst, s.part.index) for s in walk(kernel.body)
              if isinstance(s, ir.StageCopy) and s.part is not None}
    assert planes == {(f"sk_{x}_p{p}", p) for x in "ab" for p in range(4)}
    check(emit(kernel))
    assert same_bits_as_cuda(Lowering.INT32_BYTE_PLANES, "t64k32s2")


def test_pipelined_byte_planes_stage_b_column_major_in_padded_columns() -> None:
    kernel = lower(rewritten(Lowering.INT32_BYTE_PLANES, "t64k32s2").kernel)
    # B's 32 x 64 i32 tile lands transposed: 64 columns of 32 k, 16 bytes of padding each;
    # A's rows stay 32 bytes (padded, the arrays would pass 48 KiB)
    copies = {s.dst: s for s in walk(kernel.body) if isinstance(s, ir.StageCopy)}
    b = copies["sk_b_p0"]
    assert (b.rows, b.cols, b.dst_pitch) == (64, 32, 48) and transposed(b)
    assert not transposed(copies["sk_a_p0"])
    assert declared(kernel)["sk_b_p0"] == 2 * 64 * 48
    assert declared(kernel)["sk_a_p0"] == 2 * 64 * 32
    loads = {s.layout for s in walk(kernel.body)
             if isinstance(s, ir.FragLoad) and s.array.startswith("sk_b")}
    assert loads == {ir.FragLayout.COL}


def test_byte_planes_without_staged_copies_keep_b_row_major() -> None:
    kernel = lower(rewritten(Lowering.INT32_BYTE_PLANES, "t64k32").kernel)
    loads = {(s.layout, s.stride) for s in walk(kernel.body)
             if isinstance(s, ir.FragLoad) and s.array.startswith("sk_b")}
    assert loads == {(ir.FragLayout.ROW, ir.Const(value=64, type=ElemType.I32))}


@pytest.mark.parametrize("pad", [0, 16])
def test_a_transposed_byte_plane_copy_validates(pad: int) -> None:
    kernel = staged_planes_kernel(2, pad)
    copy = next(s for s in walk(kernel.body) if isinstance(s, ir.StageCopy))
    assert transposed(copy)
    text = emit(lower(kernel))
    check(text)
    # each landing of a block (at the wait, and before its registers take another copy) is
    # four 32-bit stores into the tile's words, one per block row; no 16-byte store
    stores = re.findall(r"OpStore (%\w+) %\w+ NonPrivatePointer", text)
    chains = dict(re.findall(r"(%\w+) = OpAccessChain (%p_wo_\w+) %\w+_tile ", text))
    assert [chains[p] for p in stores] == ["%p_wo_u32"] * 8


def test_byte_plane_padding_is_whole_16_byte_words() -> None:
    with pytest.raises(StagingError, match="multiple of 16 bytes"):
        Staging(planes_pad_bytes=8)


def test_tiles_that_are_not_whole_words_for_each_invocation_are_copied_by_element() -> None:
    # Int8 at 64x64 in 16-deep steps: a 64x16 tile of bytes is 64 words for 128 invocations
    kernel = lower(rewritten(Lowering.INT8_OPERANDS, "t64k16s2").kernel)
    assert quad_arrays(kernel) == frozenset()
    assert not any(isinstance(s, ir.StageCopy) for s in walk(kernel.body))


def step_loop(kernel: ir.Kernel) -> ir.For:
    return next(s for s in kernel.body if isinstance(s, ir.For) and s.var == "sk_k0")


def test_the_profiles_fragments_a_step_ahead_keep_the_kernels_bits() -> None:
    # bench/vulkan_profile_h200.py's variant (255 registers on the H200, spilled: not kept)
    from bench.vulkan_profile_h200 import fragments_ahead

    launch = rewritten(Lowering.F16_OPERANDS, "t128x256k16s3")
    kernel = fragments_ahead(lower(launch.kernel))
    body = step_loop(kernel).body
    kinds = [type(s).__name__ for s in body]
    # after the barrier and the refills: the previous step's products (from the second trip
    # on), then this step's fragment loads
    assert kinds[-9:] == ["If"] + ["FragLoad"] * 8 and "Barrier" in kinds[:-9]
    later = body[-9]
    assert isinstance(later, ir.If) and all(isinstance(s, ir.FragMulAdd) for s in later.then)
    after = kernel.body[kernel.body.index(step_loop(kernel)) + 1]
    assert isinstance(after, ir.If) and after.then == later.then  # the last step's products
    check(print_kernel(kernel))
    want = launch.simulate(target="spirv")
    assert same_bits(sim_simulate(kernel, launch), want)
    # the same kernel without the last step's products loses them
    cut = kernel.model_copy(update={"body": tuple(s for s in kernel.body if s is not after)})
    assert not same_bits(sim_simulate(cut, launch), want)
    # steps of two sub-steps are left as they are
    deep = lower(rewritten(Lowering.F16_OPERANDS, "t128x256k32s2").kernel)
    assert fragments_ahead(deep) == deep


def test_vulkan_converts_f32_operands_in_a_pre_pass_before_its_pipelined_schedules() -> None:
    done = compiled(Lowering.BF16_OPERANDS, None, (1024, 1024, 64), on="vulkan")
    assert done.rewritten is not None and done.rewritten.schedule.name == "t128x256k16s2"
    assert len(done.runs) == 2 and {s.elem for s in done.scratch} == {ElemType.BF16}
    assert not any(isinstance(s, ir.StageCopy) and s.part is not None
                   for s in walk(done.lowered.body))  # the GEMM stages bf16 as it is
    for step in done.runs:
        check(step.text)
    # small regions keep the one kernel that converts as it stages
    assert len(compiled(Lowering.BF16_OPERANDS, None, on="vulkan").runs) == 1
    assert same_bits_as_cuda(Lowering.BF16_OPERANDS, "t128x256k16s2")
