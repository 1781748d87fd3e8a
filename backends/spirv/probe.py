"""Reads a Vulkan device's cooperative-matrix list
(``vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR``) into the gate's ``DeviceSupport``, and
its extensions (``vulkan_extensions``);
the ``vulkan`` package is imported where a device is probed, so that sarek runs without it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from sarek.coopmat import Component, Config, DeviceSupport, GateError, Scope, Shape

_VK_COMPONENT = {  # VkComponentTypeKHR
    0: Component.F16, 1: Component.F32, 3: Component.S8, 5: Component.S32,
    7: Component.U8, 9: Component.U32, 1000141000: Component.BF16,
}
_VK_SCOPE = {3: Scope.SUBGROUP, 2: Scope.WORKGROUP}  # VkScopeKHR
T = TypeVar("T")


def from_vulkan_properties(device: str, props: Any) -> DeviceSupport:
    """A support description from ``VkCooperativeMatrixPropertiesKHR`` records (objects with
    ``MSize NSize KSize AType BType CType ResultType saturatingAccumulation scope``);
    component or scope codes sarek has no name for are skipped."""
    configs = set()
    for p in props:
        codes = (p.AType, p.BType, p.CType, p.ResultType)
        if not all(c in _VK_COMPONENT for c in codes) or p.scope not in _VK_SCOPE:
            continue
        a, b, c, r = (_VK_COMPONENT[x] for x in codes)
        configs.add(Config(Shape(int(p.MSize), int(p.NSize), int(p.KSize)), a, b, c, r,
                           _VK_SCOPE[p.scope], bool(p.saturatingAccumulation)))
    return DeviceSupport(device, frozenset(configs),
                         note="vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR")


def vulkan_support(instance: Any, physical_device: Any) -> DeviceSupport:
    """Reads ``vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR`` of ``physical_device``
    through the ``vulkan`` package (imported here, so that sarek runs without it). A device
    without ``VK_KHR_cooperative_matrix`` supports nothing. Needs a Vulkan driver: it runs on
    the GPU machine, not in CI."""
    try:
        import vulkan as vk
    except (ImportError, OSError) as e:
        raise GateError(f"probing Vulkan needs the 'vulkan' package and a Vulkan loader ({e})"
                        ) from None
    props = vk.vkGetPhysicalDeviceProperties(physical_device)
    name = f"{_vk_text(vk, props.deviceName)} (Vulkan)"
    if "VK_KHR_cooperative_matrix" not in _extensions(vk, physical_device):
        return DeviceSupport(name, frozenset(), note="Vulkan extensions",
                             unsupported_reason="the device lacks VK_KHR_cooperative_matrix")
    query = vk.vkGetInstanceProcAddr(instance,
                                     "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR")
    return from_vulkan_properties(name, query(physical_device))


def _vk_text(vk: Any, value: Any) -> str:
    """A Vulkan string field: the ``vulkan`` package gives ``str`` (seen on the H200) or, in
    other versions, a cffi char array."""
    return value if isinstance(value, str) else str(vk.ffi.string(value).decode())


def vulkan_devices() -> list[DeviceSupport]:
    """Creates a Vulkan 1.3 instance and probes every physical device (GPU machine only)."""
    return _each_device(vulkan_support)


def vulkan_extensions() -> dict[str, list[str]]:
    """Each Vulkan device's extensions, by its name (the compute limits the runner heeds are
    ``backends.spirv.device.Device``'s)."""
    def named(instance: Any, physical_device: Any) -> tuple[str, list[str]]:
        import vulkan as vk

        props = vk.vkGetPhysicalDeviceProperties(physical_device)
        return (f"{_vk_text(vk, props.deviceName)} (Vulkan)",
                sorted(_extensions(vk, physical_device)))
    return dict(_each_device(named))


def _extensions(vk: Any, physical_device: Any) -> set[str]:
    return {_vk_text(vk, e.extensionName)
            for e in vk.vkEnumerateDeviceExtensionProperties(physical_device, None)}


def _each_device(probe: Callable[[Any, Any], T]) -> list[T]:
    """``probe(instance, physical_device)`` of every device of a Vulkan 1.3 instance."""
    try:
        import vulkan as vk
    except (ImportError, OSError) as e:
        raise GateError(f"probing Vulkan needs the 'vulkan' package and a Vulkan loader ({e})"
                        ) from None
    app = vk.VkApplicationInfo(sType=vk.VK_STRUCTURE_TYPE_APPLICATION_INFO,
                               pApplicationName="sarek", apiVersion=vk.VK_MAKE_VERSION(1, 3, 0))
    info = vk.VkInstanceCreateInfo(sType=vk.VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                                   pApplicationInfo=app)
    instance = vk.vkCreateInstance(info, None)
    try:
        return [probe(instance, d) for d in vk.vkEnumeratePhysicalDevices(instance)]
    finally:
        vk.vkDestroyInstance(instance, None)
