"""Run a kernel's SPIR-V through Vulkan compute (the ``vulkan`` package: cffi bindings).

``run`` mirrors ``sim.simulate``: the same arguments, and every array parameter's final
contents by name, so that a device and the simulator can be compared bit for bit. The kernel
is printed (``backends.spirv.emit``), assembled by ``spirv-as``, and dispatched once on the
first Vulkan device with a compute queue: every array a device-local storage buffer (copied in
and out through one host-visible staging buffer), scalars as push constants, the block as the
module's three specialization constants, and for a kernel with fragments the subgroup size
pinned to the kernel's with full subgroups (cooperative matrices belong to real subgroups,
and the printed ``subgroup_id`` is the linear index divided by that size).

The device is created once per process with every feature the printer may need that it has
(8/16-bit storage, shaderFloat16, shaderInt8/16/64, shaderFloat64, the Vulkan memory model,
maintenance4 for ``LocalSizeId``, subgroup size control, cooperative matrices, bf16); a kernel
whose module needs one the device lacks is refused with the reason (``VulkanError``).
``unavailable_reason()`` says in one line why no device can run here (None when one can) and
never raises.
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from backends.spirv.emit import emit, push_constant_layout
from backends.spirv.tools import assemble, tools_reason
from sarek import ir
from sarek.coopmat import DeviceSupport, from_vulkan_properties
from sarek.dtypes import numpy_dtype
from sarek.errors import SarekError

BF16_FEATURES = 1000141000  # VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_BFLOAT16_FEATURES_KHR
REQUIRE_FULL_SUBGROUPS = 0x2  # VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT
EXTENSIONS = ("VK_KHR_cooperative_matrix", "VK_KHR_shader_bfloat16")


class VulkanError(SarekError):
    """Vulkan is missing, a call failed, or the device lacks what a kernel needs."""


def _vk() -> Any:
    try:
        import vulkan
    except (ImportError, OSError) as e:  # OSError: the package found no Vulkan loader
        raise VulkanError(f"the 'vulkan' package and a Vulkan loader are needed ({e})".replace(
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


def _chain(vk: Any) -> tuple[Any, dict[str, Any], list[Any]]:
    """A features query chain: VkPhysicalDeviceFeatures2 -> 1.1 -> 1.2 -> 1.3 -> cooperative
    matrix -> bf16 (a raw block: the bindings predate VK_KHR_shader_bfloat16)."""
    raw = vk.ffi.new("uint64_t[4]")
    raw[0] = BF16_FEATURES
    coop = vk.VkPhysicalDeviceCooperativeMatrixFeaturesKHR(
        sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR,
        pNext=vk.ffi.cast("void*", raw))
    v13 = vk.VkPhysicalDeviceVulkan13Features(
        sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES, pNext=coop)
    v12 = vk.VkPhysicalDeviceVulkan12Features(
        sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, pNext=v13)
    v11 = vk.VkPhysicalDeviceVulkan11Features(
        sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, pNext=v12)
    top = vk.VkPhysicalDeviceFeatures2(sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                       pNext=v11)
    return top, {"v11": v11, "v12": v12, "v13": v13, "coop": coop, "bf16": raw},\
        [raw, coop, v13, v12, v11, top]


def _read_features(vk: Any, parts: dict[str, Any], top: Any, bf16: bool) -> dict[str, bool]:
    out = {name: bool(getattr(top.features, name)) for name in _CORE}
    for key, names in (("v11", _V11), ("v12", _V12), ("v13", _V13)):
        out |= {name: bool(getattr(parts[key], name)) for name in names}
    out["cooperativeMatrix"] = bool(parts["coop"].cooperativeMatrix)
    raw = parts["bf16"]
    out["shaderBFloat16Type"] = bf16 and bool(raw[2] & 0xFFFFFFFF)
    out["shaderBFloat16CooperativeMatrix"] = bf16 and bool(raw[3] & 0xFFFFFFFF)
    return out


def _open(vk: Any, instance: Any, physical: Any, family: int) -> Device:
    props = vk.vkGetPhysicalDeviceProperties(physical)
    name = _text(vk, props.deviceName)
    exts = {_text(vk, e.extensionName)
            for e in vk.vkEnumerateDeviceExtensionProperties(physical, None)}
    enabled = [e for e in EXTENSIONS if e in exts]
    top, parts, holders = _chain(vk)
    if "VK_KHR_shader_bfloat16" not in exts:  # an unknown struct in the chain is invalid
        parts["coop"].pNext = vk.ffi.NULL
    if "VK_KHR_cooperative_matrix" not in exts:
        parts["v13"].pNext = vk.ffi.NULL
    vk.vkGetPhysicalDeviceFeatures2(physical, top)
    features = _read_features(vk, parts, top, "VK_KHR_shader_bfloat16" in exts)
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
    if "VK_KHR_cooperative_matrix" in exts:
        from sarek.coopmat import vulkan_support

        support = vulkan_support(instance, physical)
    else:
        support = from_vulkan_properties(f"{name} (Vulkan)", [])
    pool = vk.vkCreateCommandPool(dev, vk.VkCommandPoolCreateInfo(
        sType=vk.VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, queueFamilyIndex=family,
        flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT), None)
    return Device(vk, instance, physical, dev, queue, family, name, features, sizes,
                  float(props.limits.timestampPeriod), support, memory_types, pool, holders)


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


@dataclass
class _Buffer:
    handle: Any
    memory: Any
    size: int


def _memory_type(d: Device, bits: int, want: int) -> int:
    for i, (flags, _) in enumerate(d.memory_types):
        if bits & (1 << i) and flags & want == want:
            return i
    raise VulkanError(f"no Vulkan memory type with properties {want:#x}")


def _buffer(d: Device, size: int, usage: int, want: int) -> _Buffer:
    vk = d.vk
    handle = vk.vkCreateBuffer(d.device, vk.VkBufferCreateInfo(
        sType=vk.VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, size=size, usage=usage,
        sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE), None)
    req = vk.vkGetBufferMemoryRequirements(d.device, handle)
    memory = vk.vkAllocateMemory(d.device, vk.VkMemoryAllocateInfo(
        sType=vk.VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, allocationSize=req.size,
        memoryTypeIndex=_memory_type(d, req.memoryTypeBits, want)), None)
    vk.vkBindBufferMemory(d.device, handle, memory, 0)
    return _Buffer(handle, memory, size)


def _free(d: Device, b: _Buffer) -> None:
    d.vk.vkDestroyBuffer(d.device, b.handle, None)
    d.vk.vkFreeMemory(d.device, b.memory, None)


def _values(kernel: ir.Kernel, args: Sequence[Any] | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(args, Mapping):
        return dict(args)
    return dict(zip([p.name for p in kernel.params], args, strict=True))


def push_constants(kernel: ir.Kernel, values: Mapping[str, Any]) -> bytes:
    """The push-constant block of ``kernel``'s scalar arguments (``emit`` lays it out)."""
    out = bytearray()
    for p, offset, wire in push_constant_layout(kernel):
        out += bytes(offset - len(out))
        value = numpy_dtype(p.elem).type(values[p.name])
        if p.elem is ir.ElemType.BOOL:
            word = struct.pack("<I", int(bool(value)))
        elif p.elem.is_storage_only:
            word = struct.pack("<I", int(np.asarray(value).view(np.uint16)))
        else:
            word = np.asarray(value).astype(numpy_dtype(wire)).tobytes()
        out += word
    return bytes(out)


class _Pipeline:
    """One kernel's compute pipeline, its buffers and one command buffer that copies the
    arrays in, dispatches ``repeats`` times (timestamps around each) and copies them out."""

    def __init__(self, d: Device, kernel: ir.Kernel, arrays: list[np.ndarray], pc: bytes,
                 block: tuple[int, int, int], text: str | None = None) -> None:
        vk = d.vk
        self.d, self.kernel = d, kernel
        text = emit(kernel) if text is None else text
        gaps = missing(text, kernel)
        if gaps:
            raise VulkanError(f"{d.name} cannot run kernel {kernel.name!r}: it lacks "
                              + ", ".join(gaps))
        code = assemble(runnable(text, d))
        self.objects: list[tuple[str, Any]] = []
        self.module = vk.vkCreateShaderModule(d.device, vk.VkShaderModuleCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, codeSize=len(code),
            pCode=code), None)
        self.objects.append(("vkDestroyShaderModule", self.module))
        n = len(arrays)
        bindings = [vk.VkDescriptorSetLayoutBinding(
            binding=i, descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptorCount=1,
            stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT) for i in range(n)]
        layout_info = vk.VkDescriptorSetLayoutCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, bindingCount=n,
            pBindings=bindings or None)
        self.set_layout = vk.vkCreateDescriptorSetLayout(d.device, layout_info, None)
        self.objects.append(("vkDestroyDescriptorSetLayout", self.set_layout))
        ranges = [vk.VkPushConstantRange(stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT, offset=0,
                                         size=len(pc))] if pc else []
        self.layout = vk.vkCreatePipelineLayout(d.device, vk.VkPipelineLayoutCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, setLayoutCount=1,
            pSetLayouts=[self.set_layout], pushConstantRangeCount=len(ranges),
            pPushConstantRanges=ranges or None), None)
        self.objects.append(("vkDestroyPipelineLayout", self.layout))
        entries = [vk.VkSpecializationMapEntry(constantID=i, offset=4 * i, size=4)
                   for i in range(3)]
        data = vk.ffi.new("uint32_t[3]", list(block))
        spec = vk.VkSpecializationInfo(mapEntryCount=3, pMapEntries=entries, dataSize=12,
                                       pData=data)
        stage_next, flags = None, 0
        if "CooperativeMatrixKHR" in text:
            stage_next = vk.VkPipelineShaderStageRequiredSubgroupSizeCreateInfo(
                sType=vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO,
                requiredSubgroupSize=kernel.subgroup or 32)
            flags = REQUIRE_FULL_SUBGROUPS
        stage = vk.VkPipelineShaderStageCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, pNext=stage_next,
            flags=flags, stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=self.module,
            pName=kernel.name, pSpecializationInfo=spec)
        self.pipeline = vk.vkCreateComputePipelines(d.device, None, 1, [
            vk.VkComputePipelineCreateInfo(sType=vk.VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
                                           stage=stage, layout=self.layout)], None)[0]
        self.objects.append(("vkDestroyPipeline", self.pipeline))
        # buffers: device-local storage, one host-visible staging buffer for both directions
        usage = (vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
                 | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT)
        sizes = [max(4, -(-a.nbytes // 4) * 4) for a in arrays]
        self.buffers = [_buffer(d, s, usage, vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)
                        for s in sizes]
        self.offsets = [int(x) for x in np.cumsum([0, *sizes])]
        host = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
        self.staging = _buffer(d, max(4, self.offsets[-1]), usage, host)
        self.arrays = arrays
        self.pc = pc
        # (a pool of no descriptors is invalid: a kernel without arrays gets room for one)
        pool_info = vk.VkDescriptorPoolCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, maxSets=1, poolSizeCount=1,
            pPoolSizes=[vk.VkDescriptorPoolSize(type=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                descriptorCount=max(n, 1))])
        self.descriptor_pool = vk.vkCreateDescriptorPool(d.device, pool_info, None)
        self.objects.append(("vkDestroyDescriptorPool", self.descriptor_pool))
        self.set = vk.vkAllocateDescriptorSets(d.device, vk.VkDescriptorSetAllocateInfo(
            sType=vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
            descriptorPool=self.descriptor_pool, descriptorSetCount=1,
            pSetLayouts=[self.set_layout]))[0]
        if n:
            writes = [vk.VkWriteDescriptorSet(
                sType=vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, dstSet=self.set, dstBinding=i,
                descriptorCount=1, descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                pBufferInfo=[vk.VkDescriptorBufferInfo(buffer=b.handle, offset=0, range=b.size)])
                for i, b in enumerate(self.buffers)]
            vk.vkUpdateDescriptorSets(d.device, n, writes, 0, None)

    def execute(self, grid: tuple[int, int, int], repeats: int = 1) -> tuple[
            list[np.ndarray], list[float]]:
        """Copies the arrays in, dispatches ``repeats`` times, copies them out: the arrays
        after the last dispatch and the seconds each dispatch took (timestamps)."""
        d, vk = self.d, self.d.vk
        mapped = np.frombuffer(vk.vkMapMemory(d.device, self.staging.memory, 0,
                                              self.staging.size, 0), np.uint8)
        for a, start in zip(self.arrays, self.offsets, strict=False):
            mapped[start:start + a.nbytes] = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
        queries = vk.vkCreateQueryPool(d.device, vk.VkQueryPoolCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
            queryType=vk.VK_QUERY_TYPE_TIMESTAMP, queryCount=2 * repeats), None)
        cmd = vk.vkAllocateCommandBuffers(d.device, vk.VkCommandBufferAllocateInfo(
            sType=vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, commandPool=d.pool,
            level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1))[0]
        fence = vk.vkCreateFence(d.device, vk.VkFenceCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_FENCE_CREATE_INFO), None)
        try:
            self.record(cmd, queries, grid, repeats)
            vk.vkQueueSubmit(d.queue, 1, [vk.VkSubmitInfo(
                sType=vk.VK_STRUCTURE_TYPE_SUBMIT_INFO, commandBufferCount=1,
                pCommandBuffers=[cmd])], fence)
            vk.vkWaitForFences(d.device, 1, [fence], vk.VK_TRUE, 600 * 10**9)
            times: list[float] = []
            if all(grid):
                stamps = vk.ffi.new("uint64_t[]", 2 * repeats)
                vk.vkGetQueryPoolResults(d.device, queries, 0, 2 * repeats, 16 * repeats,
                                         stamps, 8, vk.VK_QUERY_RESULT_64_BIT
                                         | vk.VK_QUERY_RESULT_WAIT_BIT)
                times = [(stamps[2 * i + 1] - stamps[2 * i]) * d.timestamp_period * 1e-9
                         for i in range(repeats)]
            out = [mapped[start:start + a.nbytes].copy().view(a.dtype)
                   for a, start in zip(self.arrays, self.offsets, strict=False)]
        finally:
            vk.vkUnmapMemory(d.device, self.staging.memory)
            vk.vkDestroyFence(d.device, fence, None)
            vk.vkFreeCommandBuffers(d.device, d.pool, 1, [cmd])
            vk.vkDestroyQueryPool(d.device, queries, None)
        return out, times

    def record(self, cmd: Any, queries: Any, grid: tuple[int, int, int], repeats: int) -> None:
        vk = self.d.vk
        vk.vkBeginCommandBuffer(cmd, vk.VkCommandBufferBeginInfo(
            sType=vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
            flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT))
        vk.vkCmdResetQueryPool(cmd, queries, 0, 2 * repeats)
        for b, start in zip(self.buffers, self.offsets, strict=False):
            vk.vkCmdCopyBuffer(cmd, self.staging.handle, b.handle, 1,
                               [vk.VkBufferCopy(srcOffset=start, dstOffset=0, size=b.size)])
        self.barrier(cmd, vk.VK_PIPELINE_STAGE_TRANSFER_BIT,
                     vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, vk.VK_ACCESS_TRANSFER_WRITE_BIT,
                     vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT)
        vk.vkCmdBindPipeline(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, self.pipeline)
        vk.vkCmdBindDescriptorSets(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, self.layout, 0, 1,
                                   [self.set], 0, None)
        if self.pc:
            vk.vkCmdPushConstants(cmd, self.layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0,
                                  len(self.pc), vk.ffi.new("char[]", self.pc))
        if all(grid):  # a zero grid dimension is an empty launch
            for i in range(repeats):
                if i:
                    self.barrier(cmd, vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                                 vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                                 vk.VK_ACCESS_SHADER_WRITE_BIT,
                                 vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT)
                vk.vkCmdWriteTimestamp(cmd, vk.VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, queries, 2 * i)
                vk.vkCmdDispatch(cmd, *grid)
                vk.vkCmdWriteTimestamp(cmd, vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries,
                                       2 * i + 1)
        self.barrier(cmd, vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                     vk.VK_PIPELINE_STAGE_TRANSFER_BIT, vk.VK_ACCESS_SHADER_WRITE_BIT,
                     vk.VK_ACCESS_TRANSFER_READ_BIT)
        for b, start in zip(self.buffers, self.offsets, strict=False):
            vk.vkCmdCopyBuffer(cmd, b.handle, self.staging.handle, 1,
                               [vk.VkBufferCopy(srcOffset=0, dstOffset=start, size=b.size)])
        self.barrier(cmd, vk.VK_PIPELINE_STAGE_TRANSFER_BIT, vk.VK_PIPELINE_STAGE_HOST_BIT,
                     vk.VK_ACCESS_TRANSFER_WRITE_BIT, vk.VK_ACCESS_HOST_READ_BIT)
        vk.vkEndCommandBuffer(cmd)

    def barrier(self, cmd: Any, src: int, dst: int, src_access: int, dst_access: int) -> None:
        vk = self.d.vk
        vk.vkCmdPipelineBarrier(cmd, src, dst, 0, 1, [vk.VkMemoryBarrier(
            sType=vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER, srcAccessMask=src_access,
            dstAccessMask=dst_access)], 0, None, 0, None)

    def close(self) -> None:
        d = self.d
        for b in [*self.buffers, self.staging]:
            _free(d, b)
        for fn, handle in reversed(self.objects):
            getattr(d.vk, fn)(d.device, handle, None)


def _prepare(kernel: ir.Kernel, args: Sequence[Any] | Mapping[str, Any]
             ) -> tuple[list[ir.ArrayParam], list[np.ndarray], bytes]:
    values = _values(kernel, args)
    params = [p for p in kernel.params if isinstance(p, ir.ArrayParam)]
    arrays = [np.ascontiguousarray(np.asarray(values[p.name], dtype=numpy_dtype(p.elem))
                                   ).reshape(-1) for p in params]
    return params, arrays, push_constants(kernel, values)


def _dims(t: tuple[int, ...]) -> tuple[int, int, int]:
    g = (*t, 1, 1)[:3]
    return int(g[0]), int(g[1]), int(g[2])


def run(kernel: ir.Kernel, args: Sequence[Any] | Mapping[str, Any], grid: tuple[int, ...],
        block: tuple[int, ...]) -> dict[str, np.ndarray]:
    """Dispatches ``kernel`` once on the Vulkan device and returns every array parameter's
    contents afterwards; ``VulkanError`` when the device cannot run it (with the reason)."""
    d = device()
    params, arrays, pc = _prepare(kernel, args)
    pipe = _Pipeline(d, kernel, arrays, pc, _dims(block))
    try:
        out, _ = pipe.execute(_dims(grid))
    finally:
        pipe.close()
    return {p.name: a for p, a in zip(params, out, strict=True)}


def time_kernel(kernel: ir.Kernel, args: Sequence[Any] | Mapping[str, Any],
                grid: tuple[int, ...], block: tuple[int, ...], repeats: int = 10,
                text: str | None = None) -> tuple[dict[str, np.ndarray], list[float]]:
    """Dispatches ``kernel`` ``repeats + 1`` times over the same buffers (the first warms up)
    and returns the arrays after the last and the seconds of each timed dispatch (GPU
    timestamps). ``text``: a module to run instead of the printed one (for experiments on
    the SPIR-V a kernel is printed as; its interface must be the kernel's)."""
    d = device()
    params, arrays, pc = _prepare(kernel, args)
    pipe = _Pipeline(d, kernel, arrays, pc, _dims(block), text)
    try:
        out, times = pipe.execute(_dims(grid), repeats + 1)
    finally:
        pipe.close()
    return {p.name: a for p, a in zip(params, out, strict=True)}, times[1:]
