"""The launch path's CUDA device and the H200's policy: where the device launching a kernel
cannot run the policy's schedule (no ``wgmma`` before sm_90, less shared memory a block), the
rewrite takes the policy's next schedule for the lowering that it runs, down to the seed's."""

from __future__ import annotations

import pytest
from conftest import EXAMPLES

from backends.conformance.cases import refusal
from backends.cuda import compile_cubin, nvrtc_available
from backends.cuda.fit import Device
from backends.cuda.shared import dynamic_bytes
from backends.pipeline import compile_launch
from backends.registry import target
from sarek import ir
from sarek.errors import SarekError
from sarek.ir_walk import walk
from sarek.loader import load_module
from sarek.matrix_rewrite import RewriteError
from sarek.matrix_scheme import Lowering
from sarek.schedule import Schedule

CUDA = target("cuda")
H200 = Device("sm_90", 227 * 1024)
A100 = Device("sm_80", 163 * 1024)
RTX = Device("sm_86", 99 * 1024)


def large(example: str) -> object:
    return load_module(EXAMPLES / f"{example}.py").make(1024, 1024, 64)


def wgmma(kernel: ir.Kernel) -> bool:
    return any(isinstance(s, ir.Wgmma) for s in walk(kernel.body))


@pytest.mark.parametrize(("example", "lowering", "device", "expected"), [
    # F16 of f16: the policy's next F16 schedule, mma.sync's 128x256 tiles (87.5 KiB)
    ("gemm_f16", Lowering.F16_OPERANDS, A100, "t128x256k32s3"),
    ("gemm_f16", Lowering.F16_OPERANDS, RTX, "t128x256k32s3"),
    # Bf16's large schedules: wgmma after the conversion pre-pass, then 178.5 KiB: the seed's
    ("gemm_f32", Lowering.BF16_OPERANDS, A100, "t64k16"),
    ("gemm_f32", Lowering.BF16_OPERANDS, RTX, "t64k16"),
    # Bf16x3 after the split: wgmma's t128x128k64s2g runs on neither, t128x256k32s2 (167
    # KiB) fits neither, t128x256k16s3 (136.25 KiB) sm_80's 163 KiB, not sm_86's 99
    ("gemm_f32", Lowering.BF16X3_OPERANDS, A100, "t128x256k16s3"),
    ("gemm_f32", Lowering.BF16X3_OPERANDS, RTX, "t64k16"),
], ids=["f16-sm_80", "f16-sm_86", "bf16-sm_80", "bf16-sm_86", "bf16x3-sm_80", "bf16x3-sm_86"])
def test_a_device_that_refuses_the_policy_gets_its_next_schedule_that_runs_there(
        example: str, lowering: Lowering, device: Device, expected: str) -> None:
    launch = large(example)
    policy = compile_launch(CUDA, launch, lowering=lowering)
    fitted = compile_launch(CUDA, launch, lowering=lowering, refusal=device.refusal)
    assert policy.rewritten is not None and fitted.rewritten is not None
    assert fitted.rewritten.schedule.name == expected
    assert not wgmma(fitted.lowered) and dynamic_bytes(fitted.lowered) <= device.shared_bytes
    # the conversion pre-pass goes with the wgmma schedules, the split with Bf16x3's pipelined
    assert len(fitted.before) == (1 if fitted.rewritten.schedule.stages > 1
                                  and lowering is Lowering.BF16X3_OPERANDS else 0)
    if expected != policy.rewritten.schedule.name:  # the H200's kernel does not run there
        assert device.refusal(policy.lowered) is not None


def test_the_h200_keeps_the_policy_and_an_asked_for_schedule_is_kept() -> None:
    launch = large("gemm_f16")
    policy = compile_launch(CUDA, launch)
    on_h200 = compile_launch(CUDA, launch, refusal=H200.refusal)
    assert on_h200.rewritten is not None and policy.rewritten is not None
    assert on_h200.rewritten.schedule == policy.rewritten.schedule and wgmma(on_h200.lowered)
    asked = compile_launch(CUDA, launch, schedule=policy.rewritten.schedule,
                           refusal=A100.refusal)
    assert asked.rewritten is not None and asked.rewritten.schedule == policy.rewritten.schedule


def test_a_device_that_runs_none_of_the_policy_is_refused_with_its_reason() -> None:
    def nothing(kernel: ir.Kernel) -> str:
        return f"this device runs no kernel, {kernel.name!r} included"

    with pytest.raises(RewriteError, match="this device runs no kernel"):
        compile_launch(CUDA, large("gemm_f16"), refusal=nothing)


def test_the_reasons_name_the_instruction_and_the_bytes() -> None:
    lowered = compile_launch(CUDA, large("gemm_f16")).lowered
    assert "wgmma, which sm_80 does not have" in str(A100.refusal(lowered))
    bf16 = compile_launch(CUDA, large("gemm_f32"), lowering=Lowering.BF16_OPERANDS,
                          schedule=Schedule.parse("t128x256k32s3")).lowered
    assert f"at most {RTX.shared_bytes}" in str(RTX.refusal(bf16))


@pytest.mark.skipif(nvrtc_available() is not None, reason=f"NVRTC: {nvrtc_available()}")
def test_what_an_sm_80_device_gets_compiles_for_sm_80() -> None:
    fitted = compile_launch(CUDA, large("gemm_f16"), refusal=A100.refusal)
    compile_cubin(fitted.text, "sm_80")


@pytest.mark.parametrize("lowering", [Lowering.F16_OPERANDS, Lowering.BF16_OPERANDS])
def test_a_policy_schedule_the_target_cannot_lower_gives_way_to_the_next(
        lowering: Lowering) -> None:
    # batched operands: no tensor map serves the producer warpgroup's copies (their origin
    # moves with the batch), so the policy's next schedule, wgmma fed by cp.async, runs
    launch = large("gemm_batched")
    chosen = compile_launch(CUDA, launch, lowering=lowering)
    assert chosen.rewritten is not None
    assert chosen.rewritten.schedule.name == "t128x256k64s3gf" and wgmma(chosen.lowered)
    with pytest.raises(SarekError, match="a producer warpgroup copies the loop's tiles by "
                                         "tensor maps"):
        compile_launch(CUDA, launch, lowering=lowering,
                       schedule=Schedule.parse("t128x256k64s3gw"))


def test_a_producer_refused_for_a_tile_read_by_ldmatrix_says_which_and_what_depth() -> None:
    # 32-deep steps: A's 64-byte rows stay in registers (ldmatrix), where the producer's
    # tensor maps land 128-byte swizzle atoms for wgmma
    with pytest.raises(SarekError, match=r"sk_a_hi is loaded into registers by ldmatrix.*"
                                         r"take steps 64 deep"):
        compile_launch(CUDA, large("gemm_f32"), lowering=Lowering.BF16X3_OPERANDS,
                       schedule=Schedule.parse("t128x256k32s2gwr"))


def test_conformance_leaves_out_a_schedule_the_target_cannot_lower_with_the_reason() -> None:
    why = refusal(CUDA, large("gemm_batched"), (Lowering.BF16_OPERANDS, 32, 16),
                  Schedule.parse("t128x256k64s3gw"))
    assert why is not None and "tensor maps" in why
