"""What workgroup-scope cooperative matrices (``VK_NV_cooperative_matrix2``) make of the F16
GEMM through Vulkan, beside the module the ``vulkan`` target prints and CUDA's policy, in one
run.

The device's workgroup-scope support is read first: the extension's features (as
``backends.spirv.device`` enables them), its properties (the largest workgroup, the largest
flexible dimension, the workgroup memory the driver keeps for itself) and its flexible
dimension configurations (``vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV``,
called through the loader, which the ``vulkan`` bindings predate).

Then, at ``--n`` cubed (the F16 lowering's example, ``gemm_f16``: f16 operands, f32
accumulators, f16 results), a module printed here is timed for each ``--tile MxNxK@INVOCATIONS``:
each workgroup takes an M x N tile of the result as one workgroup-scope accumulator and steps
through the reduction K deep, loading A's M x K and B's K x N tiles straight from the storage
buffers (``OpCooperativeMatrixLoadKHR``, row-major, or with a ``t`` after the tile through
tensor layouts, ``OpCooperativeMatrixLoadTensorNV``, or with ``pD`` through them D steps
ahead of the product), multiplying them into it
(``OpCooperativeMatrixMulAddKHR``) and, at the end, rounding it to f16 (``OpFConvert``, the
module's rounding mode to nearest even) and storing it. The driver decides the staging, the
waves' shares and the order of the products within each step. Each output is compared bit for
bit with CUDA's (which the simulator reproduces), so a row says whether the driver sums in the
order the simulator models. Writes bench/results/vulkan_workgroup_scope_h200.json (``--out``).

This is a probe of the device, not a lowering: the module has the printed kernel's interface
(``backends.spirv.run.time_kernel(text=...)``) but handles only sizes its tiles divide.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

from backends.cuda.run import device_arch
from backends.pipeline import compile_launch
from backends.registry import target
from backends.spirv import lower as spirv_lower
from backends.spirv.device import COOPMAT2_NAMES, Device, device, device_name, runnable
from backends.spirv.emit import print_kernel
from backends.spirv.run import time_kernel
from bench.backends_speed_h200 import EXAMPLES
from bench.gpu_speed_h200 import REPEATS, kernel_output, kernel_seconds
from sarek.loader import load_module
from sarek.matrix_scheme import Lowering
from sarek.schedule import Schedule

ROOT = Path(__file__).resolve().parent.parent
PROPERTIES = 1000593002  # VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_PROPERTIES_NV
FLEXIBLE = 1000593001  # VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV
COMPONENTS = {0: "f16", 1: "f32", 2: "f64", 3: "s8", 4: "s16", 5: "s32", 6: "s64", 7: "u8",
              8: "u16", 9: "u32", 10: "u64", 1000141000: "bf16"}
SCOPES = {1: "device", 2: "workgroup", 3: "subgroup", 5: "queue family"}


def workgroup_properties(d: Device) -> dict[str, int]:
    """VkPhysicalDeviceCooperativeMatrix2PropertiesNV's three limits."""
    vk = d.vk
    raw = vk.ffi.new("uint32_t[8]")  # sType, pad, pNext, three uint32
    raw[0] = PROPERTIES
    p2 = vk.VkPhysicalDeviceProperties2(sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                        pNext=vk.ffi.cast("void*", raw))
    vk.vkGetPhysicalDeviceProperties2(d.physical, p2)
    return {"workgroup_scope_max_workgroup_size": int(raw[4]),
            "flexible_dimensions_max_dimension": int(raw[5]),
            "workgroup_scope_reserved_shared_memory": int(raw[6])}


def flexible_dimensions(d: Device) -> list[dict[str, Any]]:
    """Each VkCooperativeMatrixFlexibleDimensionsPropertiesNV the driver reports."""
    vk = d.vk
    loader = ctypes.CDLL("libvulkan.so.1")
    loader.vkGetInstanceProcAddr.restype = ctypes.c_void_p
    loader.vkGetInstanceProcAddr.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    address = loader.vkGetInstanceProcAddr(
        int(vk.ffi.cast("uintptr_t", d.instance)),
        b"vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV")
    if not address:
        return []
    query = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32),
                             ctypes.c_void_p)(address)
    physical = int(vk.ffi.cast("uintptr_t", d.physical))
    count = ctypes.c_uint32(0)
    query(physical, ctypes.byref(count), None)
    words = 14  # sType, pad, pNext, ten uint32
    raw = (ctypes.c_uint32 * (words * count.value))()
    for i in range(count.value):
        raw[words * i] = FLEXIBLE
    query(physical, ctypes.byref(count), raw)
    out = []
    for i in range(count.value):
        f = raw[words * i + 4: words * i + 14]
        out.append({"granularity": [f[0], f[1], f[2]],
                    "a": COMPONENTS.get(f[3], f[3]), "b": COMPONENTS.get(f[4], f[4]),
                    "c": COMPONENTS.get(f[5], f[5]), "result": COMPONENTS.get(f[6], f[6]),
                    "saturating": bool(f[7]), "scope": SCOPES.get(f[8], f[8]),
                    "workgroup_invocations": f[9]})
    return out


def _pointer_loads() -> str:
    return """%ao = OpIAdd %i32 %a0 %k0
%pa = OpAccessChain %p_f16 %a %i0 %ao
%fa = OpCooperativeMatrixLoadKHR %ma_t %pa %i0 %k
%br = OpIMul %i32 %k0 %n
%bo = OpIAdd %i32 %br %col0
%pb = OpAccessChain %p_f16 %b %i0 %bo
%fb = OpCooperativeMatrixLoadKHR %mb_t %pb %i0 %n
"""


LAYOUTS = """%pm = OpAccessChain %p_i32 %params %i0
%m = OpLoad %i32 %pm
%um = OpBitcast %u32 %m
%un = OpBitcast %u32 %n
%uk = OpBitcast %u32 %k
%layout = OpCreateTensorLayoutNV %layout_t
%layout_a = OpTensorLayoutSetDimensionNV %layout_t %layout %um %uk
%layout_b = OpTensorLayoutSetDimensionNV %layout_t %layout %uk %un
%urow0 = OpBitcast %u32 %row0
%ucol0 = OpBitcast %u32 %col0
%pa = OpAccessChain %p_f16 %a %i0 %i0
%pb = OpAccessChain %p_f16 %b %i0 %i0
"""


def _tensor_loads(at: str, suffix: str) -> str:
    """Tensor-layout loads of A's and B's tiles at reduction offset ``at`` (a u32)."""
    return f"""%slice_a{suffix} = OpTensorLayoutSliceNV %layout_t %layout_a %urow0 %tm {at} %tk
%fa{suffix} = OpCooperativeMatrixLoadTensorNV %ma_t %pa %za %slice_a{suffix} Aligned 16 None
%slice_b{suffix} = OpTensorLayoutSliceNV %layout_t %layout_b {at} %tk %ucol0 %tn
%fb{suffix} = OpCooperativeMatrixLoadTensorNV %mb_t %pb %zb %slice_b{suffix} Aligned 16 None
"""


def _constants(tk: int, ahead: int) -> str:
    """The reduction offsets of the steps loaded before the loop, and how far ahead it loads."""
    return "".join(f"%uk_first{j} = OpConstant %u32 {j * tk}\n" for j in range(ahead)) \
        + f"%i_far = OpConstant %i32 {ahead * tk}\n"


def _header(held: str = "") -> str:
    """The loop's header: the reduction offset, the accumulator and ``held`` (phis of tiles
    loaded ahead) carried around it, the test of the bound, and the step's label."""
    return """OpBranch %head
%head = OpLabel
%k0 = OpPhi %i32 %i0 %entry %k1 %step
%acc = OpPhi %acc_t %acc0 %entry %acc1 %step
""" + held + """%more = OpSLessThan %bool %k0 %k
OpLoopMerge %done %step None
OpBranchConditional %more %step %done
%step = OpLabel
"""


def _loop(loads: str, ahead: int = 1) -> str:
    """The reduction loop: ``pointer`` or ``tensor`` loads of the step's tiles before its
    product, or ``prefetch``: the first ``ahead`` steps' tiles loaded before the loop and each
    step's loads those of the step ``ahead`` steps later (past the end, the layout's clamp
    value), issued before the step's product."""
    if loads == "prefetch":
        first = "".join(_tensor_loads(f"%uk_first{j}", f"_first{j}") for j in range(ahead))
        held = "".join(f"%fa{j} = OpPhi %ma_t %fa_first{j} %entry %fa_next{j} %step\n"
                       f"%fb{j} = OpPhi %mb_t %fb_first{j} %entry %fb_next{j} %step\n"
                       for j in range(ahead))
        shifted = "".join(f"%fa_next{j} = OpCopyObject %ma_t %fa{j + 1}\n"
                          f"%fb_next{j} = OpCopyObject %mb_t %fb{j + 1}\n"
                          for j in range(ahead - 1))
        return LAYOUTS + first + _header(held) + """%k1 = OpIAdd %i32 %k0 %itk
%k_far = OpIAdd %i32 %k0 %i_far
%uk_far = OpBitcast %u32 %k_far
""" + _tensor_loads("%uk_far", f"_next{ahead - 1}") + shifted \
            + """%acc1 = OpCooperativeMatrixMulAddKHR %acc_t %fa0 %fb0 %acc
OpBranch %head
"""
    body = _pointer_loads() if loads == "pointer" else "%uk0 = OpBitcast %u32 %k0\n" \
        + _tensor_loads("%uk0", "")
    return (LAYOUTS if loads == "tensor" else "") + _header() + body \
        + """%acc1 = OpCooperativeMatrixMulAddKHR %acc_t %fa %fb %acc
%k1 = OpIAdd %i32 %k0 %itk
OpBranch %head
"""


def module(name: str, tm: int, tn: int, tk: int, invocations: int,
           loads: str = "pointer", ahead: int = 1) -> str:
    """SPIR-V assembly of the F16 GEMM ``c = f16(a @ b)`` with one workgroup-scope tm x tn
    accumulator per workgroup, its tiles loaded as ``_loop`` says (interface: the rewritten
    kernel's buffers a, b, c at bindings 0 to 2 and its eight i32 push constants, of which it
    reads m (0), n (1) and k (2))."""
    tensor = loads != "pointer"
    tensors = ("OpCapability TensorAddressingNV\nOpCapability "
               "CooperativeMatrixTensorAddressingNV\n" if tensor else "")
    extension = 'OpExtension "SPV_NV_tensor_addressing"\n' if tensor else ""
    # clamp mode Constant (the clamp value, zero, past the limits) where loads run ahead
    clamp = "%u1" if loads == "prefetch" else "%u0"
    layout_type = f"%layout_t = OpTypeTensorLayoutNV %u2 {clamp}\n" if tensor else ""
    loop = _loop(loads, ahead)
    constants = _constants(tk, ahead) if loads == "prefetch" else ""
    return f"""OpCapability Shader
OpCapability VulkanMemoryModel
OpCapability CooperativeMatrixKHR
OpCapability Float16
OpCapability StorageBuffer16BitAccess
OpCapability RoundingModeRTE
{tensors}OpExtension "SPV_KHR_cooperative_matrix"
OpExtension "SPV_NV_cooperative_matrix2"
{extension}OpMemoryModel Logical Vulkan
OpEntryPoint GLCompute %main "{name}" %a %b %c %params %group
OpExecutionModeId %main LocalSizeId %size_x %size_y %size_z
OpExecutionMode %main RoundingModeRTE 16
OpDecorate %rta_f16 ArrayStride 2
OpDecorate %buffer Block
OpMemberDecorate %buffer 0 Offset 0
OpDecorate %a DescriptorSet 0
OpDecorate %a Binding 0
OpDecorate %a NonWritable
OpDecorate %b DescriptorSet 0
OpDecorate %b Binding 1
OpDecorate %b NonWritable
OpDecorate %c DescriptorSet 0
OpDecorate %c Binding 2
OpDecorate %constants Block
""" + "".join(f"OpMemberDecorate %constants {i} Offset {4 * i}\n" for i in range(8)) + f"""\
OpDecorate %group BuiltIn WorkgroupId
OpDecorate %size_x SpecId 0
OpDecorate %size_y SpecId 1
OpDecorate %size_z SpecId 2
%void = OpTypeVoid
%fn = OpTypeFunction %void
%u32 = OpTypeInt 32 0
%i32 = OpTypeInt 32 1
%f16 = OpTypeFloat 16
%f32 = OpTypeFloat 32
%bool = OpTypeBool
%v3u32 = OpTypeVector %u32 3
%rta_f16 = OpTypeRuntimeArray %f16
%buffer = OpTypeStruct %rta_f16
%p_buffer = OpTypePointer StorageBuffer %buffer
%p_f16 = OpTypePointer StorageBuffer %f16
%a = OpVariable %p_buffer StorageBuffer
%b = OpVariable %p_buffer StorageBuffer
%c = OpVariable %p_buffer StorageBuffer
%constants = OpTypeStruct %i32 %i32 %i32 %i32 %i32 %i32 %i32 %i32
%p_constants = OpTypePointer PushConstant %constants
%p_i32 = OpTypePointer PushConstant %i32
%params = OpVariable %p_constants PushConstant
%p_v3u32 = OpTypePointer Input %v3u32
%group = OpVariable %p_v3u32 Input
%size_x = OpSpecConstant %u32 {invocations}
%size_y = OpSpecConstant %u32 1
%size_z = OpSpecConstant %u32 1
%u0 = OpConstant %u32 0
%u1 = OpConstant %u32 1
%u2 = OpConstant %u32 2
%tm = OpConstant %u32 {tm}
%tn = OpConstant %u32 {tn}
%tk = OpConstant %u32 {tk}
%i0 = OpConstant %i32 0
%i1 = OpConstant %i32 1
%i2 = OpConstant %i32 2
%itm = OpConstant %i32 {tm}
%itn = OpConstant %i32 {tn}
%itk = OpConstant %i32 {tk}
%zero = OpConstant %f32 0
{constants}%ma_t = OpTypeCooperativeMatrixKHR %f16 %u2 %tm %tk %u0
%mb_t = OpTypeCooperativeMatrixKHR %f16 %u2 %tk %tn %u1
%acc_t = OpTypeCooperativeMatrixKHR %f32 %u2 %tm %tn %u2
%out_t = OpTypeCooperativeMatrixKHR %f16 %u2 %tm %tn %u2
%acc0 = OpConstantComposite %acc_t %zero
%zero16 = OpConstant %f16 0
%za = OpConstantComposite %ma_t %zero16
%zb = OpConstantComposite %mb_t %zero16
{layout_type}%main = OpFunction %void None %fn
%entry = OpLabel
%ids = OpLoad %v3u32 %group
%gx = OpCompositeExtract %u32 %ids 0
%gy = OpCompositeExtract %u32 %ids 1
%x = OpBitcast %i32 %gx
%y = OpBitcast %i32 %gy
%pn = OpAccessChain %p_i32 %params %i1
%n = OpLoad %i32 %pn
%pk = OpAccessChain %p_i32 %params %i2
%k = OpLoad %i32 %pk
%row0 = OpIMul %i32 %y %itm
%col0 = OpIMul %i32 %x %itn
%a0 = OpIMul %i32 %row0 %k
{loop}%done = OpLabel
%rounded = OpFConvert %out_t %acc
%cr = OpIMul %i32 %row0 %n
%co = OpIAdd %i32 %cr %col0
%pc = OpAccessChain %p_f16 %c %i0 %co
OpCooperativeMatrixStoreKHR %pc %rounded %i0 %n
OpReturn
OpFunctionEnd
"""


def parse_tile(text: str) -> tuple[int, int, int, int, str, int]:
    """``MxNxK@INVOCATIONS``, with a trailing ``t`` for loads through tensor layouts or ``pD``
    for those loads D steps ahead (``p`` alone: one; ``_loop``)."""
    match = re.fullmatch(r"(\d+)x(\d+)x(\d+)@(\d+)(t|p\d*)?", text)
    if match is None:
        raise SystemExit(f"--tile {text}: expected MxNxK@INVOCATIONS, then t or pD or nothing")
    tm, tn, tk, invocations = (int(v) for v in match.groups()[:4])
    suffix = match[5] or ""
    loads = {"t": "tensor", "p": "prefetch"}.get(suffix[:1], "pointer")
    return tm, tn, tk, invocations, loads, int(suffix[1:] or 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--schedule", default="t128x256k16s3",
                        help="the printed module's schedule, timed beside (the policy's)")
    parser.add_argument("--tile", action="append", default=[], metavar="MxNxK@INVOCATIONS",
                        help="a workgroup tile to time (128x256x32@256; a trailing t loads "
                             "through tensor layouts, pD those loads D steps ahead); may be "
                             "repeated")
    parser.add_argument("--out", default="vulkan_workgroup_scope_h200.json")
    opts = parser.parse_args(argv)
    n, flops = opts.n, 2.0 * opts.n ** 3
    d = device()
    record: dict[str, Any] = {
        "device": device_name(), "n": n, "repeats": REPEATS,
        "features": {k: d.features.get(k, False) for k in COOPMAT2_NAMES},
        "properties": workgroup_properties(d), "flexible_dimensions": flexible_dimensions(d),
        "rows": []}
    print(json.dumps({k: record[k] for k in ("features", "properties")}, indent=1))
    for f in record["flexible_dimensions"]:
        print(f)
    lowering = Lowering("F16_operands")
    original = load_module(ROOT / "examples" / f"{EXAMPLES[lowering]}.py").make(n, n, n)
    arch = device_arch()
    cuda = compile_launch(target("cuda"), original, lowering=lowering)
    assert cuda.rewritten is not None
    want = kernel_output(cuda, arch, "c").view(np.uint16)

    def row(variant: str, seconds: list[float] | float, out: np.ndarray | None = None,
            **extra: Any) -> None:
        median = statistics.median(seconds) if isinstance(seconds, list) else seconds
        r = {"variant": variant, "median_s": median, "tflops": flops / median / 1e12, **extra}
        if out is not None:
            got = out.view(np.uint16)
            r["bit_identical_to_cuda"] = bool(np.array_equal(got, want))
            r["outputs_differing"] = int(np.count_nonzero(got != want))
        record["rows"].append(r)
        regs = next((v for k, v in extra.get("statistics", {}).items()
                     if "register" in k.lower()), None)
        print(f"{variant:32} {median * 1e3:8.3f} ms {r['tflops']:7.1f} TFLOP/s"
              + (f"  regs {regs:.0f}" if regs is not None else "")
              + (f"  as CUDA's: {r['bit_identical_to_cuda']} ({r['outputs_differing']} differ)"
                 if out is not None else ""), flush=True)

    assert cuda.rewritten is not None
    row(f"CUDA policy {cuda.rewritten.schedule.name}", kernel_seconds(cuda, arch))
    printed = compile_launch(target("vulkan"), original, lowering=lowering,
                             schedule=Schedule.parse(opts.schedule))
    launch = printed.launch
    stats: dict[str, float] = {}
    out, times = time_kernel(launch.kernel, dict(launch.args), launch.grid, launch.block,
                             REPEATS, text=runnable(print_kernel(spirv_lower.lower(launch.kernel)),
                                                    d), statistics=stats)
    row(f"Vulkan as printed {opts.schedule}", times, out["c"], statistics=stats)
    for tile in opts.tile:
        tm, tn, tk, invocations, loads, ahead = parse_tile(tile)
        text = module(launch.kernel.name, tm, tn, tk, invocations, loads, ahead)
        stats = {}
        try:
            out, times = time_kernel(launch.kernel, dict(launch.args), (n // tn, n // tm, 1),
                                     (invocations, 1, 1), REPEATS, text=runnable(text, d),
                                     statistics=stats)
        except Exception as e:  # a driver refusal of one tile ends no run
            record["rows"].append({"variant": f"workgroup scope {tile}",
                                   "error": f"{type(e).__name__}: {e}"[:400]})
            print(f"workgroup scope {tile}: {type(e).__name__}: {e}"[:400], flush=True)
            continue
        row(f"workgroup scope {tile}", times, out["c"], statistics=stats)
    path = ROOT / "bench" / "results" / opts.out
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
