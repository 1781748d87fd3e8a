"""Run a kernel's SPIR-V through Vulkan compute on ``backends.spirv.device``'s device.

``run`` mirrors ``sim.simulate``: the same arguments, and every array parameter's final
contents by name, so that a device and the simulator can be compared bit for bit. The kernel
is printed (``backends.spirv.emit``), assembled by ``spirv-as``, and dispatched once on the
first Vulkan device with a compute queue: every array a device-local storage buffer (copied in
and out through one host-visible staging buffer), scalars as push constants, the block as the
module's three specialization constants, and for a kernel with fragments the subgroup size
pinned to the kernel's with full subgroups (cooperative matrices belong to real subgroups,
and the printed ``subgroup_id`` is the linear index divided by that size). A kernel whose
module needs a feature the device lacks is refused with the reason (``VulkanError``).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from backends.spirv import device as vulkan_device
from backends.spirv.device import (
    REQUIRE_FULL_SUBGROUPS,
    Device,
    VulkanError,
    cannot_run,
    missing,
    runnable,
)
from backends.spirv.emit import emit, push_constant_layout
from backends.spirv.lower import lower
from backends.spirv.tools import assemble
from sarek import ir
from sarek.dtypes import numpy_dtype

if TYPE_CHECKING:  # sarek.launch reaches the registry, which imports this module
    from sarek.launch import Launch, Steps


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
                 block: tuple[int, int, int], text: str | None = None,
                 keep_binary: bool = False) -> None:
        vk = d.vk
        self.d, self.kernel = d, kernel
        text = emit(kernel) if text is None else text
        gaps = missing(text, kernel) + cannot_run(lower(kernel), d, block)
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
        capture = vk.VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR if d.statistics else 0
        cache = vk.vkCreatePipelineCache(d.device, vk.VkPipelineCacheCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO), None) if keep_binary else None
        self.pipeline = vk.vkCreateComputePipelines(d.device, cache, 1, [
            vk.VkComputePipelineCreateInfo(sType=vk.VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
                                           flags=capture, stage=stage, layout=self.layout)],
            None)[0]
        self.objects.append(("vkDestroyPipeline", self.pipeline))
        self.binary = b""  # the pipeline cache's data, where asked (the driver's binary)
        if cache is not None:
            size = vk.ffi.new("size_t*")
            vk.lib.vkGetPipelineCacheData(d.device, cache, size, vk.ffi.NULL)
            data = vk.ffi.new("char[]", size[0])
            vk.lib.vkGetPipelineCacheData(d.device, cache, size, data)
            self.binary = bytes(vk.ffi.buffer(data, size[0]))
            vk.vkDestroyPipelineCache(d.device, cache, None)
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

    def statistics(self) -> dict[str, float]:
        """What the driver reports of compiling the pipeline (registers, spills, ...; empty
        where it reports nothing)."""
        d, vk = self.d, self.d.vk
        if not d.statistics:
            return {}
        query = vk.vkGetDeviceProcAddr(d.device, "vkGetPipelineExecutableStatisticsKHR")
        info = vk.VkPipelineExecutableInfoKHR(
            sType=vk.VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR, pipeline=self.pipeline,
            executableIndex=0)
        out: dict[str, float] = {}
        for stat in query(d.device, info):
            value = stat.value
            out[str(stat.name)] = float((value.b32, value.i64, value.u64, value.f64)[
                int(stat.format)])
        return out

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
    d = vulkan_device.device()
    params, arrays, pc = _prepare(kernel, args)
    pipe = _Pipeline(d, kernel, arrays, pc, _dims(block))
    try:
        out, _ = pipe.execute(_dims(grid))
    finally:
        pipe.close()
    return {p.name: a for p, a in zip(params, out, strict=True)}


def time_kernel(kernel: ir.Kernel, args: Sequence[Any] | Mapping[str, Any],
                grid: tuple[int, ...], block: tuple[int, ...], repeats: int = 10,
                text: str | None = None, statistics: dict[str, float] | None = None,
                binary: list[bytes] | None = None
                ) -> tuple[dict[str, np.ndarray], list[float]]:
    """Dispatches ``kernel`` ``repeats + 1`` times over the same buffers (the first warms up)
    and returns the arrays after the last and the seconds of each timed dispatch (GPU
    timestamps). ``text``: a module to run instead of the printed one (for experiments on
    the SPIR-V a kernel is printed as; its interface must be the kernel's). ``statistics``
    receives what the driver reports of compiling it (``_Pipeline.statistics``), ``binary``
    the data of a pipeline cache that compiled only it (NVIDIA's holds its machine code:
    ``bench/vulkan_machine_code.py``)."""
    d = vulkan_device.device()
    params, arrays, pc = _prepare(kernel, args)
    pipe = _Pipeline(d, kernel, arrays, pc, _dims(block), text, binary is not None)
    try:
        if statistics is not None:
            statistics.update(pipe.statistics())
        if binary is not None:
            binary.append(pipe.binary)
        out, times = pipe.execute(_dims(grid), repeats + 1)
    finally:
        pipe.close()
    return {p.name: a for p, a in zip(params, out, strict=True)}, times[1:]


def time_steps(steps: Steps, repeats: int = 10) -> tuple[dict[str, np.ndarray], list[float]]:
    """Each launch of ``steps`` (a conversion pre-pass, then the GEMM) timed in turn by
    ``time_kernel`` over the arrays the launches before it left; the final arrays, the
    temporaries left out (``Steps.run``), and the seconds of each repeat summed over the
    launches: their GPU time, the host's copies between launches not counted."""
    per_launch: list[list[float]] = []

    def one(launch: Launch) -> dict[str, np.ndarray]:
        out, times = time_kernel(launch.kernel, dict(launch.args), launch.grid, launch.block,
                                 repeats)
        per_launch.append(times)
        return out

    out = steps.run(one)
    return out, [sum(t) for t in zip(*per_launch, strict=True)]
