"""The Vulkan device that runs sarek's SPIR-V (the ``vulkan`` package: cffi bindings).

The device is created once per process with every feature the printer may need that it has
(8/16-bit storage, shaderFloat16, shaderInt8/16/64, shaderFloat64, the Vulkan memory model,
maintenance4 for ``LocalSizeId``, subgroup size control, cooperative matrices, bf16), and
with ``VK_NV_cooperative_matrix2``'s features where the driver offers them (workgroup scope,
which no printed module uses; ``bench/vulkan_workgroup_scope_h200.py``'s modules do). This
module finds and opens it, reads its features and cooperative-matrix properties, and says what
a printed module needs that it lacks (``missing``) and which float execution modes it keeps
(``device_defaults``, ``runnable``). ``unavailable_reason()`` says in one line why no device
can run here (None when one can) and never raises.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from backends.spirv.probe import vulkan_support
from backends.spirv.tools import tools_reason
from sarek import ir
from sarek.coopmat import Available, DeviceSupport, configs_of, verdict
from sarek.dtypes import numpy_dtype
from sarek.errors import SarekError
from sarek.ir_walk import shared_arrays

BF16_FEATURES = 1000141000  # VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_BFLOAT16_FEATURES_KHR
COOPMAT2_FEATURES = 1000593000  # VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_FEATURES_NV
COOPMAT2 = "VK_NV_cooperative_matrix2"
COOPMAT2_NAMES = ("cooperativeMatrixWorkgroupScope", "cooperativeMatrixFlexibleDimensions",
                  "cooperativeMatrixReductions", "cooperativeMatrixConversions",
                  "cooperativeMatrixPerElementOperations", "cooperativeMatrixTensorAddressing",
                  "cooperativeMatrixBlockLoads")
"""VkPhysicalDeviceCooperativeMatrix2FeaturesNV's VkBool32 members, in order."""
REQUIRE_FULL_SUBGROUPS = 0x2  # VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT
STATISTICS = "VK_KHR_pipeline_executable_properties"
EXTENSIONS = ("VK_KHR_cooperative_matrix", "VK_KHR_shader_bfloat16", COOPMAT2, STATISTICS)


class VulkanError(SarekError):
    """Vulkan is missing, a call failed, or the device lacks what a kernel needs."""


def _vk() -> Any:
    try:
        import vulkan
    except (ImportError, OSError) as e:  # OSError: the package found no Vulkan loader
        raise VulkanError(f"the 'vulkan' package and a Vulkan loader are needed ({e}); pip "
                          "install 'sarek[vulkan]' and the system's Vulkan loader".replace(
                              "\n", " ")) from None
    return vulkan


def _text(vk: Any, value: Any) -> str:
    return value if isinstance(value, str) else str(vk.ffi.string(value).decode())


@dataclass
class Device:
    """The Vulkan device sarek runs on, with what it offers."""

    vk: Any
    instance: Any
    physical: Any
    device: Any
    queue: Any
    family: int
    name: str
    features: dict[str, bool]
    subgroup_sizes: tuple[int, int]
    timestamp_period: float  # nanoseconds per timestamp tick
    support: DeviceSupport
    memory_types: list[tuple[int, int]]  # (property flags, heap) per memory type
    pool: Any = None
    holders: list[Any] = field(default_factory=list)  # keeps cffi chains alive
    shared_bytes: int = 16384  # maxComputeSharedMemorySize (Vulkan's required minimum)
    invocations: int = 128  # maxComputeWorkGroupInvocations (the required minimum)
    statistics: bool = False  # the driver reports its compilers' statistics per pipeline


_CORE = ("shaderInt16", "shaderInt64", "shaderFloat64")
_V11 = ("storageBuffer16BitAccess",)
_V12 = ("storageBuffer8BitAccess", "shaderFloat16", "shaderInt8", "vulkanMemoryModel")
_V13 = ("subgroupSizeControl", "computeFullSubgroups", "maintenance4")
_FLOAT_CONTROLS = tuple(f"shader{kind}Float{w}" for kind in
                        ("DenormPreserve", "SignedZeroInfNanPreserve", "RoundingModeRTE")
                        for w in (16, 32, 64))

CAPABILITY_FEATURES = {
    "Int8": "shaderInt8", "Int16": "shaderInt16", "Int64": "shaderInt64",
    "Float16": "shaderFloat16", "Float64": "shaderFloat64",
    "StorageBuffer8BitAccess": "storageBuffer8BitAccess",
    "StorageBuffer16BitAccess": "storageBuffer16BitAccess",
    "VulkanMemoryModel": "vulkanMemoryModel", "CooperativeMatrixKHR": "cooperativeMatrix",
    "BFloat16TypeKHR": "shaderBFloat16Type",
    "BFloat16CooperativeMatrixKHR": "shaderBFloat16CooperativeMatrix",
}
"""The device feature each SPIR-V capability the printer declares needs."""


def _icd_hint() -> None:
    """NVIDIA's ICD where the GPU machine keeps it, when nothing names a driver."""
    icd = "/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json"
    if not os.environ.get("VK_DRIVER_FILES") and not os.environ.get("VK_ICD_FILENAMES") \
            and os.path.isfile(icd):
        os.environ["VK_DRIVER_FILES"] = icd


@cache
def device() -> Device:
    """The first Vulkan device with a compute queue, created once; ``VulkanError`` when there
    is none."""
    _icd_hint()
    vk = _vk()
    try:
        return _create(vk)
    except VulkanError:
        raise
    except Exception as e:  # the bindings raise their own exception classes
        raise VulkanError(f"Vulkan: {type(e).__name__} {e}".strip()) from None


def _create(vk: Any) -> Device:
    app = vk.VkApplicationInfo(sType=vk.VK_STRUCTURE_TYPE_APPLICATION_INFO,
                               pApplicationName="sarek", apiVersion=vk.VK_MAKE_VERSION(1, 3, 0))
    instance = vk.vkCreateInstance(vk.VkInstanceCreateInfo(
        sType=vk.VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, pApplicationInfo=app), None)
    kinds = [vk.VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, vk.VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU]

    def rank(physical: Any) -> int:  # a GPU before a software driver
        kind = vk.vkGetPhysicalDeviceProperties(physical).deviceType
        return kinds.index(kind) if kind in kinds else len(kinds)

    for physical in sorted(vk.vkEnumeratePhysicalDevices(instance), key=rank):
        families = vk.vkGetPhysicalDeviceQueueFamilyProperties(physical)
        compute = [i for i, f in enumerate(families) if f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT]
        props = vk.vkGetPhysicalDeviceProperties(physical)
        if compute and props.apiVersion >= vk.VK_MAKE_VERSION(1, 3, 0):
            return _open(vk, instance, physical, compute[0])
    vk.vkDestroyInstance(instance, None)
    raise VulkanError("no Vulkan 1.3 device with a compute queue")


def _chain(vk: Any, exts: set[str]) -> tuple[Any, dict[str, Any], list[Any]]:
    """A features query chain: VkPhysicalDeviceFeatures2 -> 1.1 -> 1.2 -> 1.3 -> cooperative
    matrix, then, where ``exts`` has their extensions, bf16 and workgroup-scope cooperative
    matrices (raw blocks: the bindings predate VK_KHR_shader_bfloat16 and
    VK_NV_cooperative_matrix2; an unknown struct in the chain would be invalid)."""
    raw = vk.ffi.new("uint64_t[4]")
    raw[0] = BF16_FEATURES
    raw2 = vk.ffi.new("uint64_t[6]")  # sType, pNext, seven VkBool32 (COOPMAT2_NAMES)
    raw2[0] = COOPMAT2_FEATURES
    last: Any = vk.ffi.NULL
    for block, ext in ((raw2, COOPMAT2), (raw, "VK_KHR_shader_bfloat16")):
        if ext in exts:
            block[1] = int(vk.ffi.cast("uintptr_t", last))
            last = vk.ffi.cast("void*", block)
    coop = vk.VkPhysicalDeviceCooperativeMatrixFeaturesKHR(
        sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR,
        pNext=last)
    v13 = vk.VkPhysicalDeviceVulkan13Features(
        sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES, pNext=coop)
    v12 = vk.VkPhysicalDeviceVulkan12Features(
        sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, pNext=v13)
    v11 = vk.VkPhysicalDeviceVulkan11Features(
        sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, pNext=v12)
    top = vk.VkPhysicalDeviceFeatures2(sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                       pNext=v11)
    if "VK_KHR_cooperative_matrix" not in exts:
        v13.pNext = vk.ffi.NULL
    return top, {"v11": v11, "v12": v12, "v13": v13, "coop": coop, "bf16": raw,
                 "coopmat2": vk.ffi.cast("uint32_t*", raw2)}, [raw, raw2, coop, v13, v12, v11, top]


def _read_features(vk: Any, parts: dict[str, Any], top: Any, exts: set[str]) -> dict[str, bool]:
    out = {name: bool(getattr(top.features, name)) for name in _CORE}
    for key, names in (("v11", _V11), ("v12", _V12), ("v13", _V13)):
        out |= {name: bool(getattr(parts[key], name)) for name in names}
    out["cooperativeMatrix"] = bool(parts["coop"].cooperativeMatrix)
    raw, bf16 = parts["bf16"], "VK_KHR_shader_bfloat16" in exts
    out["shaderBFloat16Type"] = bf16 and bool(raw[2] & 0xFFFFFFFF)
    out["shaderBFloat16CooperativeMatrix"] = bf16 and bool(raw[3] & 0xFFFFFFFF)
    words = parts["coopmat2"]
    out |= {name: COOPMAT2 in exts and bool(words[4 + i])
            for i, name in enumerate(COOPMAT2_NAMES)}
    return out


def _open(vk: Any, instance: Any, physical: Any, family: int) -> Device:
    props = vk.vkGetPhysicalDeviceProperties(physical)
    name = _text(vk, props.deviceName)
    exts = {_text(vk, e.extensionName)
            for e in vk.vkEnumerateDeviceExtensionProperties(physical, None)}
    enabled = [e for e in EXTENSIONS if e in exts]
    top, parts, holders = _chain(vk, exts)
    executables = None
    if STATISTICS in exts:  # the compilers' statistics (registers, spills) for the benches
        executables = vk.VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR(
            pNext=top.pNext)
        top.pNext = vk.ffi.addressof(executables)
        holders.append(executables)
    vk.vkGetPhysicalDeviceFeatures2(physical, top)
    features = _read_features(vk, parts, top, exts)
    statistics = bool(executables is not None and executables.pipelineExecutableInfo)
    # properties: subgroup sizes (1.3) and float controls (1.2)
    p13 = vk.VkPhysicalDeviceVulkan13Properties(
        sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_PROPERTIES)
    p12 = vk.VkPhysicalDeviceVulkan12Properties(
        sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_PROPERTIES, pNext=p13)
    p2 = vk.VkPhysicalDeviceProperties2(sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                        pNext=p12)
    vk.vkGetPhysicalDeviceProperties2(physical, p2)
    features |= {n: bool(getattr(p12, n)) for n in _FLOAT_CONTROLS}
    compute_stage = bool(p13.requiredSubgroupSizeStages & vk.VK_SHADER_STAGE_COMPUTE_BIT)
    features["requiredSubgroupSizeCompute"] = compute_stage
    sizes = (int(p13.minSubgroupSize), int(p13.maxSubgroupSize))
    # create the device with everything it has of what the printer may need
    for key, names in (("v11", _V11), ("v12", _V12), ("v13", _V13)):
        for n in names:
            setattr(parts[key], n, int(features[n]))
    for n in _CORE:
        setattr(top.features, n, int(features[n]))
    # only the features sarek uses stay on (robustness and the rest off)
    _only(top.features, _CORE)
    _only(parts["v11"], _V11)
    _only(parts["v12"], _V12)
    _only(parts["v13"], _V13)
    parts["coop"].cooperativeMatrix = int(features["cooperativeMatrix"])
    parts["coop"].cooperativeMatrixRobustBufferAccess = 0
    raw = parts["bf16"]
    raw[2] = int(features["shaderBFloat16Type"])
    raw[3] = int(features["shaderBFloat16CooperativeMatrix"])
    for i, feature in enumerate(COOPMAT2_NAMES):  # workgroup scope and the rest, if offered
        parts["coopmat2"][4 + i] = int(features[feature])
    queue_info = vk.VkDeviceQueueCreateInfo(sType=vk.VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                            queueFamilyIndex=family, queueCount=1,
                                            pQueuePriorities=[1.0])
    info = vk.VkDeviceCreateInfo(sType=vk.VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, pNext=top,
                                 queueCreateInfoCount=1, pQueueCreateInfos=[queue_info],
                                 enabledExtensionCount=len(enabled),
                                 ppEnabledExtensionNames=enabled)
    dev = vk.vkCreateDevice(physical, info, None)
    queue = vk.vkGetDeviceQueue(dev, family, 0)
    memory = vk.vkGetPhysicalDeviceMemoryProperties(physical)
    memory_types = [(int(memory.memoryTypes[i].propertyFlags), int(memory.memoryTypes[i].heapIndex))
                    for i in range(memory.memoryTypeCount)]
    # the probe's support says why a device without VK_KHR_cooperative_matrix runs nothing
    support = vulkan_support(instance, physical)
    pool = vk.vkCreateCommandPool(dev, vk.VkCommandPoolCreateInfo(
        sType=vk.VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, queueFamilyIndex=family,
        flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT), None)
    return Device(vk, instance, physical, dev, queue, family, name, features, sizes,
                  float(props.limits.timestampPeriod), support, memory_types, pool, holders,
                  int(props.limits.maxComputeSharedMemorySize),
                  int(props.limits.maxComputeWorkGroupInvocations), statistics)


def _only(struct_: Any, names: tuple[str, ...]) -> None:
    """Turns off every VkBool32 feature of ``struct_`` but ``names``."""
    for n in dir(struct_):
        if n in ("sType", "pNext") or n.startswith("_") or n in names:
            continue
        with contextlib.suppress(AttributeError, TypeError):  # not a VkBool32 field
            setattr(struct_, n, 0)


def unavailable_reason() -> str | None:
    """None when a Vulkan device can run kernels here (the ``vulkan`` package, a loader, a
    Vulkan 1.3 device with a compute queue, and spirv-as), else one line saying what is
    missing. Never raises."""
    missing = tools_reason()
    if missing:
        return missing
    try:
        device()
    except VulkanError as e:
        return e.reason
    except Exception as e:  # never let a probe crash a caller
        return f"Vulkan: {type(e).__name__}: {e}".splitlines()[0]
    return None


def device_name() -> str:
    """The device ``run`` uses, as a person reads it."""
    d = device()
    return f"{d.name} (Vulkan, subgroups {d.subgroup_sizes[0]}-{d.subgroup_sizes[1]})"


FLOAT_MODES = ("DenormPreserve", "SignedZeroInfNanPreserve", "RoundingModeRTE")


def device_defaults(text: str, d: Device) -> list[str]:
    """The float-controls execution modes of ``text`` the device cannot be asked for (its
    ``shader<Mode>Float<width>`` property is false): ``runnable`` leaves them to the device's
    default behaviour, which the arithmetic probes check bit for bit (on the H200:
    DenormPreserve for f32 and f64, whose defaults keep denormals)."""
    return [f"{mode} {width}" for mode, width in
            re.findall(rf"^OpExecutionMode %main ({'|'.join(FLOAT_MODES)}) (\d+)$", text, re.M)
            if not d.features.get(f"shader{mode}Float{width}")]


def runnable(text: str, d: Device) -> str:
    """``text`` without the execution modes ``device_defaults`` names (a module may not ask
    for a mode the device lacks), and without a float-controls capability none of its modes
    needs any more."""
    for mode in device_defaults(text, d):
        text = text.replace(f"OpExecutionMode %main {mode}\n", "")
    for mode in FLOAT_MODES:
        if f"OpExecutionMode %main {mode} " not in text:
            text = text.replace(f"OpCapability {mode}\n", "")
    return text


def missing(text: str, kernel: ir.Kernel) -> list[str]:
    """What the device lacks of what the module ``text`` (the kernel's SPIR-V) needs (the
    float-controls modes aside: ``device_defaults``)."""
    d = device()
    features = d.features
    caps = set(re.findall(r"^OpCapability (\w+)", text, re.M))
    gaps = [f"{feature} (for {cap})" for cap, feature in CAPABILITY_FEATURES.items()
            if cap in caps and not features.get(feature)]
    if not features.get("maintenance4"):
        gaps.append("maintenance4 (LocalSizeId)")
    if "CooperativeMatrixKHR" in caps:
        sg = kernel.subgroup or 32
        low, high = d.subgroup_sizes
        if not (features.get("subgroupSizeControl") and features.get("computeFullSubgroups")
                and features.get("requiredSubgroupSizeCompute")):
            gaps.append("subgroup size control for compute (cooperative matrices need the "
                        "kernel's subgroup size pinned)")
        elif not low <= sg <= high:
            gaps.append(f"subgroups of {sg} lanes (the device runs {low} to {high})")
    return gaps


def cannot_run(kernel: ir.Kernel, d: Device, block: tuple[int, int, int]) -> list[str]:
    """What ``d`` lacks to run ``kernel`` over blocks of ``block`` beyond its features: the
    cooperative-matrix configurations it does not report and the limits it exceeds."""
    return unsupported_configs(kernel, d.support) + over_limits(kernel, d, block)


def over_limits(kernel: ir.Kernel, d: Device, block: tuple[int, int, int]) -> list[str]:
    """The limits of ``d`` that a dispatch of ``kernel`` over blocks of ``block`` exceeds: its
    workgroup storage (the sum of its shared arrays, at the least: a driver may pad them)
    against ``maxComputeSharedMemorySize``, the block against
    ``maxComputeWorkGroupInvocations``. NVIDIA's driver creates such a pipeline, and a
    dispatch of it loses the device."""
    shared = sum(a.size * numpy_dtype(a.elem).itemsize for a in shared_arrays(kernel)
                 if a.shares is None)  # one in another's storage takes none of its own
    gaps = []
    if shared > d.shared_bytes:
        gaps.append(f"workgroup memory for {shared} bytes (it has {d.shared_bytes}; a schedule "
                    "with fewer stages or smaller tiles needs less)")
    if math.prod(block) > d.invocations:
        gaps.append(f"blocks of {math.prod(block)} invocations (it has {d.invocations})")
    return gaps


def unsupported_configs(kernel: ir.Kernel, support: DeviceSupport) -> list[str]:
    """The cooperative-matrix configurations ``kernel`` multiplies with that ``support``'s
    device does not report, each with the gate's reason. The gate decides a rewrite by its
    lowering and fragment before it is built; a schedule can still give fragments of other
    shapes (a warpgroup schedule's 16x128 accumulators), so the kernel's own are checked
    before it runs."""
    gaps = []
    for config in sorted(configs_of(kernel), key=str):
        answer = verdict(config, support)
        if not isinstance(answer, Available):
            head = f"{support.device} does not support {config}"
            detail = answer.reason.removeprefix(head).lstrip(":; ")
            gaps.append(f"the cooperative-matrix configuration {config}"
                        + (f" ({detail})" if detail else ""))
    return gaps
