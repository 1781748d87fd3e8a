"""An array in another's storage (``ir.ArrayDecl.shares``) and the rewrite's exchange array in
a staged tile's bytes: the checker's rules, the simulator's one storage under two names and its
race detector seeing both, the barriers the rewrite puts around the shared bytes (a missing one
is a race the simulator reports), where a staging policy asks for the sharing, and what each
printer makes of it."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import example
from sim_helpers import F32, I32, add, array, builtin, const, kernel, load, shared, var

import sarek
from backends.cstyle import EmitError
from backends.pipeline import Compiled, compile_launch
from backends.registry import target
from backends.spirv import check, tools_reason
from backends.spirv.lower import STAGING, lower
from sarek import ir, ir_check
from sarek.errors import SharedRace
from sarek.ir import Builtin, ElemType, MemSpace
from sarek.ir_walk import shared_arrays, walk
from sarek.launch import Launch
from sarek.matrix_pattern import recognize
from sarek.matrix_scheme import Lowering, scheme_for
from sarek.rewrite.layout import Layout
from sarek.schedule import Schedule
from sarek.staging import Staging

F16 = ElemType.F16
T = ir.Let(name="t", type=I32, value=builtin(Builtin.THREAD_IDX_X))
t = var("t")


def alias(name: str, size: int, elem: ElemType, host: str) -> ir.ArrayDecl:
    return ir.ArrayDecl(name=name, elem=elem, size=size, space=MemSpace.SHARED, shares=host)


def problems(*body: ir.Stmt) -> list[str]:
    return [p.reason for p in ir_check.check(kernel([array("out")], *body))]


# --------------------------------------------------------------------------- the checker


def test_an_array_may_share_the_storage_of_a_shared_array_declared_before_it() -> None:
    assert problems(shared("s", 8, F16), alias("w", 4, F32, "s")) == []


@pytest.mark.parametrize(("body", "reason"), [
    ((alias("w", 4, F32, "s"),), "shares the storage of 's', which is not a shared array "
                                 "declared before it"),
    ((shared("s", 8, F16), alias("w", 5, F32, "s")),
     "array 'w' (20 bytes) does not fit in the 16 bytes of 's'"),
    ((shared("s", 5, F16), alias("w", 2, F32, "s")),
     "the 10 bytes of 's' are not a whole number of the 4-byte elements of 'w'"),
    ((shared("s", 8, F16), alias("w", 4, F32, "s"), alias("v", 2, F32, "w")),
     "shares that of 's': name 's' instead"),
    ((shared("s", 8, F16), ir.ArrayDecl(name="w", elem=F32, size=4, space=MemSpace.LOCAL,
                                        shares="s")),
     "local array 'w' cannot share storage"),
    ((shared("s", 8, F16), alias("w", 4, F32, "s").model_copy(update={"align": 32})),
     "aligned to 32 bytes but shares the storage of 's', aligned to 16"),
], ids=["undeclared", "too large", "not whole elements", "a chain", "local", "alignment"])
def test_the_checker_refuses_a_sharing_that_does_not_fit(body: tuple[ir.Stmt, ...],
                                                        reason: str) -> None:
    assert any(reason in p for p in problems(*body)), problems(*body)


def test_the_sharing_survives_a_json_round_trip_and_is_absent_from_unshared_arrays() -> None:
    k = kernel([array("out")], shared("s", 8, F16), alias("w", 4, F32, "s"))
    assert ir.Kernel.model_validate_json(k.model_dump_json()) == k
    assert "shares" not in shared("s", 8, F16).model_dump_json()


# --------------------------------------------------------------------------- the simulator


def run(k: ir.Kernel, out: np.ndarray, block: int = 8) -> np.ndarray:
    return sarek.simulate(k, [out], grid=1, block=block)["out"]


def test_both_names_reach_the_same_bytes() -> None:
    # Each thread writes two f16 halves through 's'; after a barrier, the f32 through 'w' is
    # their bits reinterpreted (little-endian).
    k = kernel([array("out", F32)], shared("s", 16, F16), alias("w", 8, F32, "s"), T,
               ir.Store(array="s", index=add(t, t), value=ir.Const(value=0.0, type=F16)),
               ir.Store(array="s", index=add(add(t, t), const(1)),
                        value=ir.Const(value=1.0, type=F16)),
               ir.Barrier(),
               ir.Store(array="out", index=t, value=load("w", t, F32)))
    got = run(k, np.zeros(8, np.float32))
    want = np.array([0.0, 1.0] * 8, np.float16).view(np.float32)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_reading_through_one_name_what_another_thread_wrote_through_the_other_races() -> None:
    k = kernel([array("out", F32)], shared("s", 16, F16), alias("w", 8, F32, "s"), T,
               ir.Store(array="s", index=add(t, const(1)), value=ir.Const(value=1.0, type=F16)),
               ir.Store(array="out", index=t, value=load("w", t, F32)))
    with pytest.raises(SharedRace) as info:
        run(k, np.zeros(8, np.float32))
    assert info.value.detail.startswith("read-after-write race on shared array 'w' element 1")
    assert ("thread (2, 0, 0) wrote it (as 's' element 3, whose bytes 'w' shares) and thread "
            "(1, 0, 0) reads it") in info.value.detail
    assert info.value.statement == "body[4]"


def test_writing_through_one_name_what_another_thread_read_through_the_other_races() -> None:
    k = kernel([array("out", F32)], shared("s", 16, F16), alias("w", 8, F32, "s"), T,
               ir.Store(array="out", index=t,
                        value=ir.Cast(x=load("s", add(t, const(2)), F16), type=F32)),
               ir.Store(array="w", index=t, value=ir.Const(value=2.0, type=F32)))
    with pytest.raises(SharedRace) as info:
        run(k, np.zeros(8, np.float32))
    assert info.value.detail.startswith("write-after-read race on shared array 'w' element 1")


def test_a_barrier_between_the_names_ends_the_conflict() -> None:
    k = kernel([array("out", F32)], shared("s", 16, F16), alias("w", 8, F32, "s"), T,
               ir.Store(array="out", index=t,
                        value=ir.Cast(x=load("s", add(t, const(2)), F16), type=F32)),
               ir.Barrier(),
               ir.Store(array="w", index=t, value=ir.Const(value=2.0, type=F32)),
               ir.Barrier(),
               ir.Store(array="out", index=t, value=load("w", t, F32)))
    assert list(run(k, np.zeros(8, np.float32))) == [2.0] * 8


def test_an_access_through_one_name_to_bytes_a_copy_is_still_landing_in_races() -> None:
    four = ir.Binary(op=ir.BinOp.MUL, a=t, b=const(4), type=I32)
    k = kernel([array("x", F32), array("out", I32)], shared("s", 32, F32),
               alias("w", 32, I32, "s"), T,
               ir.CpAsync(dst="s", dst_index=four, src="x", src_index=four),
               ir.StageCommit(),
               ir.Store(array="out", index=t, value=load("w", four, I32)))
    with pytest.raises(SharedRace) as info:
        sarek.simulate(k, [np.zeros(32, np.float32), np.zeros(8, np.int32)], grid=1, block=8)
    assert "copy to it (as 's' element 0, whose bytes 'w' shares) has not been waited for" in \
        info.value.detail


def test_each_block_has_its_own_copy_of_the_shared_bytes() -> None:
    # 12 bytes per block hold three f32 of 'w': its blocks' copies lie 12 bytes apart.
    block = builtin(Builtin.BLOCK_IDX_X)
    k = kernel([array("out", I32)], shared("s", 6, F16), alias("w", 3, I32, "s"), T,
               ir.Store(array="w", index=t, value=add(block, t)),
               ir.Barrier(),
               ir.Store(array="out", index=add(ir.Binary(op=ir.BinOp.MUL, a=block, b=const(3),
                                                         type=I32), t),
                        value=load("w", t, I32)))
    out = sarek.simulate(k, [np.zeros(12, np.int32)], grid=4, block=3)["out"]
    assert list(out) == [b + x for b in range(4) for x in range(3)]


# --------------------------------------------------------------------------- the rewrite

WIDE32 = Schedule.parse("t128x256k32s2")
F16_GEMM = recognize(example("gemm_f16").make(64, 64, 64).kernel)
VULKAN_F16 = Layout(F16_GEMM, scheme_for(Lowering.F16_OPERANDS, F16), 32, 16, STAGING, WIDE32)


def shared_decls(k: ir.Kernel) -> dict[str, ir.ArrayDecl]:
    return {d.name: d for d in shared_arrays(k)}


def test_vulkans_policy_puts_the_exchange_array_in_a_tile_where_the_schedule_fits_only_so(
        ) -> None:
    decls = shared_decls(ir.Kernel(name="k", params=(), body=tuple(VULKAN_F16.declarations())))
    assert decls["sk_cs"].shares == "sk_a"
    assert (VULKAN_F16.a_stride, VULKAN_F16.b_stride) == (32, 256)  # neither tile padded
    assert VULKAN_F16.shared_bytes() == 48 * 1024


def test_a_schedule_that_fits_keeps_the_policys_staging() -> None:
    layout = Layout(F16_GEMM, scheme_for(Lowering.F16_OPERANDS, F16), 32, 16, STAGING,
                    Schedule.parse("t128x256k16s2"))
    assert layout.exchange_host is None and layout.a_stride == 16 + 8


def test_a_policy_that_does_not_ask_never_shares() -> None:
    unlimited = Staging(row_pad_bytes=16)
    limited = Staging(row_pad_bytes=16, shared_bytes=48 * 1024)
    for policy in (unlimited, limited):
        layout = Layout(VULKAN_F16.gemm, VULKAN_F16.scheme, 32, 16, policy, WIDE32)
        assert layout.exchange_host is None


def test_the_policy_counts_the_converted_arrays_the_target_declares(h200_vulkan: None) -> None:
    # Bf16x3 with three stages fits the 48 KiB once its converted term arrays are counted
    # (A unpadded); counted raw, it stays padded and needs 52 KiB.
    launch = example("gemm_f32").make(1024, 1024, 64)
    schedule = Schedule.parse("t64k16s3")
    compiled = compile_launch(target("vulkan"), launch, lowering=Lowering.BF16X3_OPERANDS,
                              schedule=schedule)
    declared = sum(d.size * d.elem.bits // 8 for d in shared_arrays(compiled.lowered)
                   if d.shares is None)
    layout = Layout(recognize(launch.kernel), scheme_for(Lowering.BF16X3_OPERANDS, F32), 32,
                    16, STAGING, schedule)
    assert layout.shared_bytes() == declared <= 48 * 1024
    assert layout.a_stride == 16


def compiled(lowering: Lowering, example_name: str, size: tuple[int, int, int],
             on: str = "spirv", schedule: Schedule = WIDE32) -> Compiled:
    launch = example(example_name).make(*size)
    return compile_launch(target(on), launch, lowering=lowering, schedule=schedule)


def rewritten(lowering: Lowering, example_name: str, size: tuple[int, int, int],
              on: str = "spirv", schedule: Schedule = WIDE32) -> Launch:
    return compiled(lowering, example_name, size, on, schedule).launch


def simulate(launch: Launch, on: str = "spirv") -> dict[str, np.ndarray]:
    return sarek.simulate(launch.kernel, dict(launch.args), grid=launch.grid,
                          block=launch.block, target=on)


def bits(out: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v.view(f"u{v.itemsize}") for k, v in out.items()}


CASES = [(Lowering.F16_OPERANDS, "gemm_f16", WIDE32), (Lowering.BF16_OPERANDS, "gemm_f32", WIDE32),
         (Lowering.INT8_OPERANDS, "gemm_i8", Schedule.parse("t128x256k64s2"))]
IDS = [f"{c[0].value}-{c[2].name}" for c in CASES]


@pytest.mark.parametrize(("lowering", "name", "schedule"), CASES, ids=IDS)
def test_the_shared_exchange_gives_cudas_bits(lowering: Lowering, name: str,
                                              schedule: Schedule) -> None:
    # A ragged region: edge tiles, k not a multiple of the step; the simulator checks every
    # access through both names for races. Bf16's f32 operands are converted by a pre-pass
    # first through Vulkan, as they are staged through CUDA: the same bits.
    ours = compiled(lowering, name, (150, 300, 70), schedule=schedule)
    assert shared_decls(ours.lowered)["sk_cs"].shares is not None
    want = compiled(lowering, name, (150, 300, 70), "cuda", schedule).steps.simulate(
        target="cuda")
    got = ours.steps.simulate(target="spirv")
    assert all(np.array_equal(bits(got)[k], bits(want)[k]) for k in want)


def varying_init() -> Launch:
    from gemm_gen import varying_init_launch

    return varying_init_launch(130, 260, 64)


def test_a_varying_initial_value_enters_through_the_shared_bytes_with_cudas_bits() -> None:
    launch = varying_init()
    ours = compile_launch(target("spirv"), launch, schedule=WIDE32).launch
    cuda = compile_launch(target("cuda"), launch, schedule=WIDE32).launch
    assert np.array_equal(bits(simulate(ours))["c"], bits(simulate(cuda, on="cuda"))["c"])


def without(k: ir.Kernel, index: int) -> ir.Kernel:
    return k.model_copy(update={"body": k.body[:index] + k.body[index + 1:]})


def top_level_barrier_before(k: ir.Kernel, first: type[ir.Stmt]) -> int:
    """The index of the last top-level barrier before the first top-level ``first``."""
    at = next(i for i, s in enumerate(k.body) if isinstance(s, first))
    return max(i for i, s in enumerate(k.body[:at]) if isinstance(s, ir.Barrier))


def test_without_the_barrier_before_the_exchange_the_simulator_reports_a_race() -> None:
    # k = 96: the last step multiplies buffer 0, whose bytes the exchange array reuses.
    ours = rewritten(Lowering.F16_OPERANDS, "gemm_f16", (128, 256, 96))
    body = ours.kernel.body
    exchange = next(i for i, s in enumerate(body) if isinstance(s, ir.FragStore))
    assert isinstance(body[exchange - 1], ir.Barrier)
    assert isinstance(body[exchange - 2], ir.StageWait)
    broken = Launch(without(ours.kernel, exchange - 1), ours.args, ours.grid, ours.block)
    with pytest.raises(SharedRace) as info:
        simulate(broken)
    assert "race on shared array 'sk_cs'" in info.value.detail
    assert "as 'sk_a' element" in info.value.detail


def test_without_the_barrier_after_the_initial_value_the_simulator_reports_a_race() -> None:
    launch = varying_init()
    ours = compile_launch(target("spirv"), launch, schedule=WIDE32).launch
    body = ours.kernel.body
    copy = next(i for i, s in enumerate(body) if isinstance(s, ir.StageCopy))
    loaded = max(i for i, s in enumerate(body[:copy]) if isinstance(s, ir.FragLoad))
    assert isinstance(body[loaded + 1], ir.Barrier)
    broken = Launch(without(ours.kernel, loaded + 1), ours.args, ours.grid, ours.block)
    with pytest.raises(SharedRace) as info:
        simulate(broken)
    assert "race on shared array 'sk_a'" in info.value.detail
    assert "as 'sk_cs' element" in info.value.detail


# --------------------------------------------------------------------------- the printers


@pytest.mark.skipif(tools_reason() is not None, reason=f"SPIRV-Tools: {tools_reason()}")
@pytest.mark.parametrize(("lowering", "name", "schedule"), CASES, ids=IDS)
def test_spirv_reaches_the_exchange_array_through_the_tiles_one_variable(
        lowering: Lowering, name: str, schedule: Schedule) -> None:
    compiled = compile_launch(target("spirv"), example(name).make(150, 300, 70),
                              lowering=lowering, schedule=schedule)
    check(compiled.text)
    assert 'OpName %' in compiled.text and '"sk_cs"' not in compiled.text
    assert any(isinstance(s, ir.FragStore) and s.array == "sk_cs"
               for s in walk(compiled.lowered.body))


@pytest.mark.skipif(tools_reason() is not None, reason=f"SPIRV-Tools: {tools_reason()}")
def test_spirv_reaches_an_array_in_storage_of_narrower_elements_element_by_element() -> None:
    # One-stage 64-deep steps at 128x256 fit only with the exchange array in sk_a's bytes,
    # which element stores fill (no 16-byte words): its f32 are pairs of f16 reinterpreted.
    compiled = compile_launch(target("spirv"), varying_init(),
                              schedule=Schedule.parse("t128x256k64"))
    assert shared_decls(compiled.lowered)["sk_cs"].shares == "sk_a"
    check(compiled.text)
    assert "OpTypeVector %f16 2" in compiled.text


@pytest.mark.skipif(tools_reason() is not None, reason=f"SPIRV-Tools: {tools_reason()}")
def test_the_byte_planes_exchange_through_four_bytes_of_a_plane_with_cudas_bits() -> None:
    # One-stage 32-deep steps at 128x256: four planes of 12 KiB, and the u32 exchange array
    # in the 8 KiB of B's first plane, each u32 four of its bytes.
    schedule = Schedule.parse("t128x256k32")
    ours = rewritten(Lowering.INT32_BYTE_PLANES, "gemm_i32", (150, 300, 70), "spirv", schedule)
    lowered = lower(ours.kernel)
    assert shared_decls(lowered)["sk_cs"].shares == "sk_b_p0"
    text = target("spirv").emit(ours.kernel)
    check(text)
    assert "OpTypeVector %u8 4" in text
    cuda = rewritten(Lowering.INT32_BYTE_PLANES, "gemm_i32", (150, 300, 70), "cuda", schedule)
    assert np.array_equal(simulate(ours)["c"], simulate(cuda, on="cuda")["c"])


def test_the_c_like_printers_refuse_an_array_in_anothers_storage() -> None:
    k = kernel([array("out", F32)], shared("s", 16, F16), alias("w", 8, F32, "s"), T,
               ir.Store(array="w", index=t, value=ir.Const(value=2.0, type=F32)))
    for name in ("cuda", "metal", "opencl"):
        with pytest.raises(EmitError, match="prints no array in another's storage"):
            target(name).emit(k)
