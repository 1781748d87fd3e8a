"""The launch path's CUDA device and the H200's policy: where the device launching a kernel
cannot run the policy's schedule (no ``wgmma`` before sm_90, less shared memory a block), the
rewrite takes the policy's next schedule for the lowering that it runs, down to the seed's."""

from __future__ import annotations

import pytest
from conftest import EXAMPLES

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

CUDA = target("cuda")
H200 = Device("sm_90", 227 * 1024)
A100 = Device("sm_80", 163 * 1024)
RTX = Device("sm_86", 99 * 1024)


def large(example: str) -> object:
    return load_module(EXAMPLES / f"{example}.py").make(1024, 1024, 64)


def wgmma(kernel: ir.Kernel) -> bool:
    return any(isinstance(s, ir.Wgmma) for s in walk(kernel.body))


@pytest.mark.parametrize(("example", "lowering"), [("gemm_f16", Lowering.F16_OPERANDS),
                                                   ("gemm_f32", Lowering.BF16_OPERANDS)])
@pytest.mark.parametrize("device", [A100, RTX], ids=["sm_80", "sm_86"])
def test_a_device_that_refuses_the_policy_gets_its_next_schedule_that_runs_there(
        example: str, lowering: Lowering, device: Device) -> None:
    launch = large(example)
    policy = compile_launch(CUDA, launch, lowering=lowering)
    assert policy.rewritten is not None
    assert device.refusal(policy.lowered) is not None  # the H200's kernel does not run there
    fitted = compile_launch(CUDA, launch, lowering=lowering, refusal=device.refusal)
    assert fitted.rewritten is not None and device.refusal(fitted.lowered) is None
    assert not wgmma(fitted.lowered) and dynamic_bytes(fitted.lowered) <= device.shared_bytes
    # the first of the policy's schedules for the lowering, in its order, that runs there
    region = fitted.rewritten.region
    order = CUDA.staging.candidates(lowering.value, region.me, region.ne)
    runs = []
    for schedule in order:
        try:
            lowered = compile_launch(CUDA, launch, lowering=lowering, schedule=schedule).lowered
        except SarekError:  # a schedule the rewrite or the lowering cannot build for it
            continue
        if device.refusal(lowered) is None:
            runs.append(schedule)
    assert fitted.rewritten.schedule == runs[0]
    assert order.index(runs[0]) > order.index(policy.rewritten.schedule)


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
    bf16 = compile_launch(CUDA, large("gemm_f32"), lowering=Lowering.BF16_OPERANDS).lowered
    assert f"at most {RTX.shared_bytes}" in str(RTX.refusal(bf16))


@pytest.mark.skipif(nvrtc_available() is not None, reason=f"NVRTC: {nvrtc_available()}")
def test_what_an_sm_80_device_gets_compiles_for_sm_80() -> None:
    fitted = compile_launch(CUDA, large("gemm_f16"), refusal=A100.refusal)
    compile_cubin(fitted.text, "sm_80")
