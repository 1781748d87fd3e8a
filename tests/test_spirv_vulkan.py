"""The spirv and vulkan targets: the device gate decides what the vulkan target runs (the
recorded H200 list when no device is here), ``sarek conformance --target sim-spirv`` passes,
a missing Vulkan is a reason and never a crash, scalars travel as the push-constant block the
printer declares; and, where a Vulkan device is here (lavapipe on a CPU machine), every example
and every exact arithmetic probe runs bit-identically to the simulator."""

from __future__ import annotations

import argparse
import struct

import numpy as np
import pytest
from arith_cases import FLOATS, INTS, N, binary_kernel, cast_kernel, edge_values, mismatches
from conftest import GEMM_EXAMPLES, example
from staged_tile_cases import (
    LIMITS,
    LOOP_LIMITS,
    THREADS,
    TILES,
    staged_loop_args,
    staged_loop_kernel,
    staged_pipeline_kernel,
    staged_planes_args,
    staged_planes_kernel,
    staged_terms_kernel,
    staged_tile_args,
    staged_tile_kernel,
)

import sarek
from backends import conformance, registry
from backends.spirv import device as vulkan_device
from backends.spirv import run as vulkan
from backends.spirv.emit import push_constant_layout
from backends.spirv.tools import tools_reason
from sarek import Global, block_dim, block_idx, f32, i32, ir, thread_idx
from sarek.dsl import numpy_dtype
from sarek.ir import ElemType
from sarek.launch import Launch, Scratch, Steps
from sarek.matrix_rewrite import rewrite_launch
from sarek.matrix_scheme import Lowering
from sim import simulate


def test_the_gate_permits_the_h200s_16x16x16_float_configurations(h200_vulkan: None) -> None:
    target = registry.target("vulkan")
    for low in (Lowering.F16_OPERANDS, Lowering.BF16_OPERANDS, Lowering.BF16X3_OPERANDS):
        assert target.refuses(low, 32, 16) is None, low


def test_the_gate_refuses_what_the_h200_does_not_report_with_the_reason(h200_vulkan: None
                                                                       ) -> None:
    target = registry.target("vulkan")
    assert "only at 16x16x16" in str(target.refuses(Lowering.BF16_OPERANDS, 32, 8))
    assert "runs subgroups of 32 lanes, not 64" in str(
        target.refuses(Lowering.F16_OPERANDS, 64, 16))
    assert "u8 x u8 + u32 -> u32 at 16x16x32" in str(
        target.refuses(Lowering.INT32_BYTE_PLANES, 32, 8))


def test_a_device_without_cooperative_matrices_is_refused_for_the_missing_extension() -> None:
    # lavapipe: no VK_KHR_cooperative_matrix and subgroups of 8; the extension is the reason
    from backends.spirv.target import gate_refusal
    from sarek.coopmat import DeviceSupport

    cpu = DeviceSupport("llvmpipe (Vulkan)", frozenset(),
                        unsupported_reason="the device lacks VK_KHR_cooperative_matrix")
    reason = gate_refusal(cpu, (8, 8), Lowering.F16_OPERANDS, 32, 16)
    assert reason is not None and "lacks VK_KHR_cooperative_matrix" in reason


def test_the_gate_permits_the_byte_planes_through_u32_accumulators(h200_vulkan: None) -> None:
    # the byte planes multiply 32 deep on Vulkan; the H200 has u8 x u8 only into u32 there,
    # which gives the s32 sums' bits
    assert registry.target("vulkan").refuses(Lowering.INT32_BYTE_PLANES, 32, 16) is None


def test_a_schedules_fragments_the_device_does_not_report_are_refused_before_running() -> None:
    from sarek.device_support import recorded_h200_vulkan
    from sarek.schedule import Schedule

    launch = example("gemm_f16").make(150, 133, 70)
    staging = registry.target("vulkan").staging

    def gaps(schedule: str) -> list[str]:
        kernel = rewrite_launch(launch, lowering=Lowering.F16_OPERANDS, staging=staging,
                                schedule=Schedule.parse(schedule)).launch.kernel
        return vulkan_device.unsupported_configs(kernel, recorded_h200_vulkan())

    assert gaps("t64k16") == [] and gaps("t128k32s3") == []
    # the warpgroup schedule's accumulators are 16x128: the gate passed F16 at fragment 16
    assert gaps("t128k64s2g") == [
        "the cooperative-matrix configuration 16x128x16 f16 x f16 + f32 -> f32 (subgroup) (it "
        "has f16 x f16 + f32 -> f32 only at 16x16x16, 16x8x16, 16x8x8)"]


def test_a_kernel_past_the_devices_workgroup_memory_or_size_is_refused_before_running() -> None:
    from sarek.device_support import recorded_h200_vulkan
    from sarek.schedule import Schedule

    # the H200's limits as its Vulkan driver reports them (bench/results/vulkan_schedules_h200.json)
    h200 = vulkan_device.Device(None, None, None, None, None, 0, "NVIDIA H200", {}, (32, 32),
                                1.0, recorded_h200_vulkan(), [], shared_bytes=49152,
                                invocations=1024)
    launch = example("gemm_f16").make(150, 133, 70)
    staging = registry.target("vulkan").staging

    def gaps(schedule: str, block: tuple[int, int, int] = (128, 1, 1)) -> list[str]:
        kernel = rewrite_launch(launch, lowering=Lowering.F16_OPERANDS, staging=staging,
                                schedule=Schedule.parse(schedule)).launch.kernel
        return vulkan_device.over_limits(kernel, h200, block)

    assert gaps("t64k16") == [] and gaps("t128k16") == []
    # three stages of 128x32 fit in 49,152 bytes only with the exchange array in A's bytes
    # and neither tile padded, which the policy does
    assert gaps("t128k32s3") == []
    # two stages of 128x64 A (rows of 72 f16: 36,864 bytes) and of 64x128 B (rows of 136:
    # 34,816 bytes), and 1,024 f32 of exchange (4,096 bytes) fit no way: staged as padded
    assert gaps("t128k64s2") == ["workgroup memory for 75776 bytes (it has 49152; a schedule "
                                 "with fewer stages or smaller tiles needs less)"]
    assert gaps("t64k16", (2048, 1, 1)) == ["blocks of 2048 invocations (it has 1024)"]


def test_the_printer_target_refuses_nothing_it_prints() -> None:
    target = registry.target("spirv")
    assert all(target.refuses(low, sg, frag) is None for low in Lowering
               for sg in (32, 64) for frag in (16, 8))


def conform(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    conformance.add_arguments(parser)
    return conformance.main(parser.parse_args(argv))


def test_sim_spirv_conformance_passes(tmp_path: pytest.TempPathFactory) -> None:
    report = tmp_path / "report.json"  # type: ignore[operator]
    assert conform("--target", "sim-spirv", "--quick", "--example", "gemm_f16", "--example",
                   "gemm_i32", "--report", str(report)) == 0


def test_no_vulkan_is_a_reason_and_an_exit_status(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: pytest.TempPathFactory) -> None:
    def absent() -> vulkan_device.Device:
        raise vulkan_device.VulkanError("no Vulkan loader here")

    monkeypatch.setattr(vulkan_device, "device", absent)
    assert vulkan_device.unavailable_reason() in ("no Vulkan loader here", tools_reason())
    report = tmp_path / "r.json"  # type: ignore[operator]
    assert conform("--target", "vulkan", "--quick", "--report", str(report)) == 3


def test_scalars_travel_in_the_push_constant_block_the_printer_declares() -> None:
    params = (ir.ScalarParam(name="x", elem=ElemType.U8),
              ir.ScalarParam(name="y", elem=ElemType.I64),
              ir.ScalarParam(name="z", elem=ElemType.F16),
              ir.ScalarParam(name="w", elem=ElemType.BOOL),
              ir.ScalarParam(name="v", elem=ElemType.I8))
    kernel = ir.Kernel(name="k", params=params, body=())
    assert [offset for _, offset, _ in push_constant_layout(kernel)] == [0, 8, 16, 20, 24]
    block = vulkan.push_constants(kernel, {"x": 200, "y": -3, "z": 1.5, "w": True, "v": -2})
    assert block == (struct.pack("<I", 200) + bytes(4) + struct.pack("<q", -3)
                     + struct.pack("<I", 0x3E00) + struct.pack("<I", 1) + struct.pack("<i", -2))


# ----------------------------------------------------------------- on a Vulkan device

needs_vulkan = pytest.mark.skipif(vulkan_device.unavailable_reason() is not None,
                                  reason=f"no Vulkan device: {vulkan_device.unavailable_reason()}")


@needs_vulkan
@pytest.mark.parametrize("size", [(37, 29, 23), (9, 5, 0)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", GEMM_EXAMPLES)
def test_every_example_runs_bit_identically(name: str, size: tuple[int, int, int]) -> None:
    launch = example(name).make(*size, seed=5)
    want = launch.simulate()
    got = vulkan.run(launch.kernel, dict(launch.args), launch.grid, launch.block)
    for array in want:
        assert np.array_equal(got[array].view(np.uint8), want[array].view(np.uint8)), array


@needs_vulkan
@pytest.mark.parametrize("strided", [False, True], ids=["rows", "strided"])
@pytest.mark.parametrize("elem", list(TILES), ids=str)
def test_staged_copies_give_the_simulators_words_inside_across_and_outside_the_limits(
        elem: ElemType, strided: bool) -> None:
    rng = np.random.default_rng(21)
    kernel = staged_tile_kernel(elem, strided)
    for case in LIMITS:
        args = staged_tile_args(elem, case, rng)
        want = sarek.simulate(kernel, dict(args), grid=1, block=THREADS, target="spirv")
        got = vulkan.run(kernel, dict(args), (1,), (THREADS,))
        assert np.array_equal(got["out"], want["out"]), case


@needs_vulkan
@pytest.mark.parametrize("elem", list(TILES), ids=str)
def test_a_loops_copies_give_the_simulators_words_in_trips_inside_and_past_the_limits(
        elem: ElemType) -> None:
    # the loop is printed twice: its trips inside the limits unchecked, then the rest; the
    # second kernel copies one trip ahead, two groups held, the loop printed two trips a round
    rng = np.random.default_rng(22)
    for kernel in (staged_loop_kernel(elem), staged_pipeline_kernel(elem)):
        for case in LOOP_LIMITS:
            args = staged_loop_args(elem, case, rng)
            want = sarek.simulate(kernel, dict(args), grid=1, block=THREADS, target="spirv")
            got = vulkan.run(kernel, dict(args), (1,), (THREADS,))
            assert np.array_equal(got["out"], want["out"]), (kernel.name, case)


@needs_vulkan
@pytest.mark.parametrize("pad", [0, 16], ids=["dense", "padded"])
@pytest.mark.parametrize("index", [0, 1, 2, 3])
def test_transposed_copies_land_the_simulators_byte_planes(index: int, pad: int) -> None:
    # rows of the tile down the source's columns: printed in 4 x 4 blocks, one 32-bit word
    # per row and plane landed from four loaded words
    rng = np.random.default_rng(24)
    kernel = staged_planes_kernel(index, pad)
    for case in LIMITS:
        if case[2] != 1:
            continue
        args = staged_planes_args(case, rng)
        want = sarek.simulate(kernel, dict(args), grid=1, block=THREADS, target="spirv")
        got = vulkan.run(kernel, dict(args), (1,), (THREADS,))
        assert np.array_equal(got["out"], want["out"]), case


@needs_vulkan
@pytest.mark.parametrize("elem", [ElemType.F16, ElemType.I32], ids=str)
def test_the_profiles_landing_after_the_first_loop_keeps_the_simulators_words(
        elem: ElemType) -> None:
    # bench/vulkan_profile_h200.py's variant: held copies landed where the first of a loop
    # printed twice ends, their words then zeros; the second loop and the waits unchanged
    from backends.spirv.device import device, runnable
    from backends.spirv.lower import lower
    from bench.vulkan_profile_h200 import PRINTERS

    rng = np.random.default_rng(25)
    for kernel in (staged_loop_kernel(elem), staged_pipeline_kernel(elem)):
        text = runnable(PRINTERS["land after the first loop"](lower(kernel)).render(), device())
        for case in LOOP_LIMITS:
            args = staged_loop_args(elem, case, rng)
            want = sarek.simulate(kernel, dict(args), grid=1, block=THREADS, target="spirv")
            got, _ = vulkan.time_kernel(kernel, dict(args), (1,), (THREADS,), 1, text=text)
            assert np.array_equal(got["out"], want["out"]), (kernel.name, case)


SPECIAL_F32 = np.array([0x3F808000, 0x3F818000, 0x3F80FFFF, 0x7F800001, 0xFFC01234,
                        0x7F800000, 0xFF800000, 0x00008000, 0x80018000, 0x7F7FFFFF, 0xFF7F8000,
                        0x00000000, 0x80000000, 0x3F800001], np.uint32)
"""f32 bits whose bf16 terms test the rounding: ties to even and to odd, NaNs (signalling,
with a payload), infinities, subnormals (a tie among them), the largest finite values (which
round to infinity), zeros."""


@needs_vulkan
@pytest.mark.parametrize("index", [0, 1, 2], ids=["hi", "mid", "lo"])
def test_staged_copies_land_the_simulators_bf16_terms(index: int) -> None:
    rng = np.random.default_rng(23)
    kernel = staged_terms_kernel(index)
    for case in LIMITS:
        if case[2] != 1:  # the column stride: the kernel reads rows of consecutive elements
            continue
        args = staged_tile_args(ElemType.F32, case, rng)
        src = args["src"]
        assert isinstance(src, np.ndarray)
        bits = src.view(np.uint32)
        # every NaN's term is the quiet NaN of its sign, whatever its payload: give the
        # random NaNs payloads above the cut too
        nan = np.isnan(src)
        bits[nan] = bits[nan] | 0x007F0000
        bits[:len(SPECIAL_F32) * 8:8] = SPECIAL_F32
        want = sarek.simulate(kernel, dict(args), grid=1, block=THREADS, target="spirv")
        got = vulkan.run(kernel, dict(args), (1,), (THREADS,))
        assert np.array_equal(got["out"], want["out"]), case


def probe(kernel: ir.Kernel, args: dict[str, np.ndarray]) -> dict[str, int]:
    with np.errstate(all="ignore"):
        want = simulate(kernel, args, grid=1, block=N)
    got = vulkan.run(kernel, args, (1,), (N,))
    return {name: mismatches(got[name], want[name]) for name in want}


@needs_vulkan
@pytest.mark.parametrize("t", INTS + FLOATS, ids=str)
def test_every_operation_is_bit_identical(t: ElemType) -> None:
    rng = np.random.default_rng(11)
    kernel, names = binary_kernel(t)
    a, b = edge_values(t, rng), np.roll(edge_values(t, rng), 5)
    if t.is_int:
        b = np.where(b == 0, np.ones_like(b), b)  # x / 0 is undefined in the IR
    arith = len(names) - 6
    assert probe(kernel, {"a": a, "b": b, "out": np.zeros(arith * N, a.dtype),
                          "flags": np.zeros(6 * N, np.bool_)}) == {"a": 0, "b": 0, "out": 0,
                                                                   "flags": 0}


@needs_vulkan
@pytest.mark.parametrize("src", [*INTS, *FLOATS, ElemType.F16, ElemType.BF16], ids=str)
def test_every_conversion_is_bit_identical(src: ElemType) -> None:
    rng = np.random.default_rng(12)
    kernel = cast_kernel(src)
    with np.errstate(over="ignore"):
        values = (edge_values(src, rng) if src not in (ElemType.F16, ElemType.BF16)
                  else edge_values(ElemType.F32, rng).astype(numpy_dtype(src)))
    args = {"a": values, **{p.name: np.zeros(N, numpy_dtype(p.elem))
                            for p in kernel.params[1:]}}
    assert {k: v for k, v in probe(kernel, args).items() if v} == {}


@needs_vulkan
def test_a_rewrite_runs_or_is_refused_with_the_reason() -> None:
    launch = rewrite_launch(example("gemm_f16").make(40, 24, 20),
                            lowering=Lowering.F16_OPERANDS).launch
    d = vulkan_device.device()
    if d.features.get("cooperativeMatrix") and d.subgroup_sizes[0] <= 32 <= d.subgroup_sizes[1]:
        want = launch.simulate(target="vulkan")
        got = vulkan.run(launch.kernel, dict(launch.args), launch.grid, launch.block)
        assert all(np.array_equal(got[k].view(np.uint8), want[k].view(np.uint8)) for k in want)
    else:
        with pytest.raises(vulkan_device.VulkanError, match=r"cooperativeMatrix|subgroups of 32"):
            vulkan.run(launch.kernel, dict(launch.args), launch.grid, launch.block)


def _raw(vk: object, block: object) -> bool:
    """Whether ``block`` is a raw features block (a pointer or array of words, its pNext the
    second 64-bit word) rather than a cffi struct."""
    return vk.ffi.typeof(block).kind in ("pointer", "array")  # type: ignore[attr-defined]


def _address(vk: object, block: object) -> int:
    ffi = vk.ffi  # type: ignore[attr-defined]
    return int(ffi.cast("uintptr_t", block if _raw(vk, block) else ffi.addressof(block)))


def _next(vk: object, block: object) -> int:
    """The address a features block's pNext holds."""
    ffi = vk.ffi  # type: ignore[attr-defined]
    if _raw(vk, block):
        return int(ffi.cast("uint64_t*", block)[1])
    return int(ffi.cast("uintptr_t", block.pNext))  # type: ignore[attr-defined]


@pytest.mark.parametrize("exts", [set(), {"VK_KHR_cooperative_matrix"},
                                  {"VK_KHR_cooperative_matrix", vulkan_device.COOPMAT2},
                                  {"VK_KHR_cooperative_matrix", "VK_KHR_shader_bfloat16"},
                                  {"VK_KHR_cooperative_matrix", "VK_KHR_shader_bfloat16",
                                   vulkan_device.COOPMAT2}], ids=lambda e: "+".join(sorted(e)))
def test_the_features_chain_holds_exactly_the_blocks_of_the_offered_extensions(
        exts: set[str]) -> None:
    """A struct of an extension the driver does not offer in the features chain is invalid:
    the chain ends at the 1.3 features without cooperative matrices, and holds the bf16 and
    workgroup-scope blocks only where their extensions are offered, each ending the chain or
    leading to the next."""
    vk = pytest.importorskip("vulkan", reason="the vulkan bindings are not installed")
    _, parts, _ = vulkan_device._chain(vk, exts)
    named = {_address(vk, parts[name]): name for name in ("coop", "bf16", "coopmat2")}
    chain, at = [], _next(vk, parts["v13"])
    while at:
        chain.append(named[at])
        at = _next(vk, parts[chain[-1]])
    want = ["coop"] * ("VK_KHR_cooperative_matrix" in exts) \
        + ["bf16"] * ("VK_KHR_shader_bfloat16" in exts) \
        + ["coopmat2"] * (vulkan_device.COOPMAT2 in exts)
    assert chain == want
    assert int(vk.ffi.cast("uint32_t*", parts["coopmat2"])[0]) == 1000593000


@needs_vulkan
def test_the_live_gate_refuses_a_device_without_cooperative_matrices_with_the_reason() -> None:
    d = vulkan_device.device()
    if d.features.get("cooperativeMatrix"):
        pytest.skip(f"{d.name} has cooperative matrices")
    reason = registry.target("vulkan").refuses(Lowering.F16_OPERANDS, 32, 16)
    assert reason is not None and f"{d.name} (Vulkan) does not support" in reason
    assert "lacks VK_KHR_cooperative_matrix" in reason


@needs_vulkan
@pytest.mark.parametrize("lowering", [Lowering.BF16_OPERANDS, Lowering.F16_OPERANDS], ids=str)
def test_the_conversion_pre_pass_gives_the_simulators_temporaries(lowering: Lowering,
                                                                  h200_vulkan: None) -> None:
    # Vulkan's pipelined schedules take f32 operands after the pre-pass (the GEMM needs
    # cooperative matrices; the conversion kernel runs on any device): ties, NaNs with
    # payloads, infinities, subnormals and the largest finite values among A's elements
    from backends.pipeline import compile_launch
    from sarek.schedule import Schedule

    launch = example("gemm_f32").make(150, 290, 70, seed=7)
    launch.args["a"].reshape(-1)[:SPECIAL_F32.size] = SPECIAL_F32.view(np.float32)
    done = compile_launch(registry.target("vulkan"), launch, lowering=lowering,
                          schedule=Schedule.parse("t128x256k16s3"))
    assert len(done.before) == 1 and len(done.scratch) == 2
    first = done.before[0].launch
    temporaries = {s.name: np.zeros(s.size, numpy_dtype(s.elem)) for s in done.scratch}
    args = {p.name: temporaries.get(p.name, first.args.get(p.name))
            for p in first.kernel.params}
    want = sarek.simulate(first.kernel, dict(args), first.grid, first.block, target="vulkan")
    got = vulkan.run(first.kernel, dict(args), first.grid, first.block)
    for s in done.scratch:
        assert np.array_equal(got[s.name].view(np.uint16), want[s.name].view(np.uint16)), s.name


@sarek.kernel
def double(x: Global[f32], y: Global[f32], n: i32):
    i = block_idx.x * block_dim.x + thread_idx.x
    if i < n:
        y[i] = 2.0 * x[i]


@sarek.kernel
def plus_one(y: Global[f32], z: Global[f32], n: i32):
    i = block_idx.x * block_dim.x + thread_idx.x
    if i < n:
        z[i] = y[i] + 1.0


@needs_vulkan
def test_time_steps_times_each_launch_over_what_the_one_before_left() -> None:
    x = np.arange(40, dtype=np.float32)
    steps = Steps((Launch(double, {"x": x, "n": 40}, 2, 32),
                   Launch(plus_one, {"z": np.zeros(40, np.float32), "n": 40}, 2, 32)),
                  (Scratch("y", ElemType.F32, 40),))
    out, times = vulkan.time_steps(steps, 3)
    assert sorted(out) == ["x", "z"] and np.array_equal(out["z"], 2 * x + 1)
    assert len(times) == 3 and all(t > 0 for t in times)
