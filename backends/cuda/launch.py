"""Launching a compiled kernel on CUDA with the caller's own arrays (``sarek.dispatch``).

* **Arrays.** An object with ``__cuda_array_interface__`` (CuPy, PyTorch, numba) is used in
  place: its pointer, checked for the parameter's dtype, C-contiguity and the launch's device.
  An object with only ``__dlpack__`` is viewed through ``cuda.core``'s ``StridedMemoryView``.
  A NumPy array is copied to the device before the launch and back after it (numba's
  behaviour), the launch then synchronizing its stream.
* **Streams.** The stream given (``kernel[grid, block, stream]``: an integer handle, a CuPy
  ``Stream`` (``.ptr``), a PyTorch stream (``.cuda_stream``) or any ``__cuda_stream__`` object),
  else the current stream of the framework whose arrays are passed (PyTorch's, CuPy's), else
  the legacy default stream.
* **Compile once.** The cubin of a printed kernel is cached under a key of the text, the
  architecture, NVRTC's version and the options (``sarek.cache``: in memory and on disk,
  across processes); the loaded module's function is kept per (cubin, device) for the
  process.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np

from backends.cuda.run import CudaError
from sarek import cache as kernel_cache
from sarek.errors import LaunchError, SarekError

if TYPE_CHECKING:
    from backends.pipeline import Compiled

CUBINS = kernel_cache.Cache("cuda")
"""Cubins by ``cubin_key``."""

_FUNCTIONS: dict[tuple[str, int], tuple[Any, int]] = {}  # (cubin key, device) -> (function, smem)
_LOADED: dict[tuple[int, int], tuple[Compiled, Any, int]] = {}  # by id(compiled), device
_LOADING = threading.Lock()


@dataclass(frozen=True)
class DeviceArray:
    """A caller's array on a GPU: its device pointer, element count and type, its device and
    the framework it came from (for its current stream)."""

    name: str
    ptr: int
    size: int
    dtype: np.dtype[Any]
    device: int | None
    framework: str


def _contiguous(shape: tuple[int, ...], strides: tuple[int, ...] | None, itemsize: int) -> bool:
    if strides is None:
        return True
    expected, step = [], itemsize
    for extent in reversed(shape):
        expected.append(step)
        step *= extent
    return all(s == e or n == 1 for s, e, n in zip(strides, reversed(expected), shape,
                                                   strict=True))


def device_array(name: str, value: Any, want: np.dtype[Any]) -> DeviceArray:
    """``value`` as a ``DeviceArray`` for the parameter ``name`` holding ``want``;
    ``LaunchError`` naming the parameter for another dtype, a non-contiguous layout or an
    object that describes no device memory."""
    framework = type(value).__module__.split(".")[0]
    cai = getattr(value, "__cuda_array_interface__", None)
    if cai is not None:
        shape = tuple(cai["shape"])
        dtype = np.dtype(cai["typestr"])
        ptr = int(cai["data"][0])
        strides = cai.get("strides")
        device = getattr(getattr(value, "device", None), "index", None) if framework == "torch" \
            else getattr(getattr(value, "device", None), "id", None)
    else:
        view = _dlpack_view(name, value)
        shape, dtype, ptr = tuple(view.shape), np.dtype(view.dtype), int(view.ptr)
        strides = None if view.strides is None else tuple(s * dtype.itemsize
                                                          for s in view.strides)
        device = int(view.device_id)
        if device < 0:
            raise LaunchError(f"argument {name!r} lives in host memory (DLPack); pass a NumPy "
                              "array or a GPU array")
    if dtype != want:
        raise LaunchError(f"argument {name!r} is an array of {dtype}; the kernel's parameter "
                          f"holds {want} (convert it before the launch)")
    if not _contiguous(shape, strides, dtype.itemsize):
        raise LaunchError(f"argument {name!r} is not contiguous; the kernel indexes it flat "
                          "(pass a contiguous copy)")
    return DeviceArray(name, ptr, int(np.prod(shape, dtype=np.int64)), dtype, device, framework)


def _dlpack_view(name: str, value: Any) -> Any:
    try:
        from cuda.core.utils import StridedMemoryView
    except ImportError:
        try:
            from cuda.core.experimental.utils import StridedMemoryView
        except ImportError:
            raise LaunchError(f"argument {name!r} offers only __dlpack__, which sarek reads "
                              "through cuda-core (pip install cuda-core)") from None
    try:
        return StridedMemoryView(value, stream_ptr=-1)
    except Exception as e:  # the producer refuses: a CPU tensor, a dtype DLPack lacks ...
        raise LaunchError(f"argument {name!r} cannot be viewed through DLPack: {e}") from None


# --------------------------------------------------------------------------- the driver


@cache
def _driver_reason() -> str | None:
    from backends.cuda.run import unavailable_reason

    return unavailable_reason()


def ensure_driver() -> None:
    """``SarekError`` with what is missing (and how to get it) unless a CUDA device can run
    kernels here."""
    reason = _driver_reason()
    if reason is not None:
        raise SarekError(f"the cuda target cannot run here: {reason} (SAREK_TARGET=sim runs "
                         "the same launch in the simulator)")


def _check(result: Any, what: str) -> Any:
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise CudaError(f"{what} failed: {err}")
    return rest[0] if len(rest) == 1 else tuple(rest)


@cache
def _arch(device: int) -> str:
    from cuda.bindings import driver as cu

    dev = _check(cu.cuDeviceGet(device), "cuDeviceGet")
    attr = cu.CUdevice_attribute
    major = _check(cu.cuDeviceGetAttribute(
        attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute")
    minor = _check(cu.cuDeviceGetAttribute(
        attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute")
    return f"sm_{major}{minor}"


@cache
def _context(device: int) -> Any:
    from cuda.bindings import driver as cu

    dev = _check(cu.cuDeviceGet(device), "cuDeviceGet")
    return _check(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")


@cache
def nvrtc_version() -> str:
    from cuda.bindings import nvrtc

    _, major, minor = nvrtc.nvrtcVersion()
    return f"{major}.{minor}"


def cubin_key(text: str, arch: str, options: tuple[str, ...] = ()) -> str:
    """The cache key of ``text`` compiled for ``arch`` by this NVRTC with ``options``."""
    return kernel_cache.key("cubin", text, arch, nvrtc_version(), *options)


def cubin(text: str, name: str, arch: str) -> tuple[str, bytes]:
    """The cubin of ``text`` for ``arch`` (compiled once, then from the cache) and its key."""
    from backends.cuda.nvrtc import compile_cubin

    k = cubin_key(text, arch)
    return k, CUBINS.get_or_make(k, lambda: compile_cubin(text, arch, f"{name}.cu"))


def _function(done: Compiled, device: int) -> tuple[Any, int]:
    """The kernel's function loaded on ``device`` and its dynamic shared memory in bytes
    (found by the compiled launch's identity first: its text is hashed once)."""
    known = _LOADED.get((id(done), device))
    if known is not None and known[0] is done:
        return known[1], known[2]
    function, shared = _load(done, device)
    _LOADED[(id(done), device)] = (done, function, shared)
    return function, shared


def _load(done: Compiled, device: int) -> tuple[Any, int]:
    from cuda.bindings import driver as cu

    from backends.cuda.shared import dynamic_bytes

    kernel = done.lowered
    k, binary = cubin(done.text, kernel.name, _arch(device))
    found = _FUNCTIONS.get((k, device))
    if found is not None:
        return found
    with _LOADING:
        if (k, device) not in _FUNCTIONS:
            _check(cu.cuCtxSetCurrent(_context(device)), "cuCtxSetCurrent")
            module = _check(cu.cuModuleLoadData(binary), "cuModuleLoadData")
            function = _check(cu.cuModuleGetFunction(module, kernel.name.encode()),
                              "cuModuleGetFunction")
            shared = dynamic_bytes(kernel)
            if shared:
                _check(cu.cuFuncSetAttribute(
                    function,
                    cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    shared), "cuFuncSetAttribute")
            _FUNCTIONS[(k, device)] = (function, shared)
    return _FUNCTIONS[(k, device)]


def _stream_handle(stream: Any, arrays: list[DeviceArray], device: int) -> int:
    if stream is not None:
        if isinstance(stream, int):
            return stream
        for attribute in ("cuda_stream", "ptr", "handle"):
            handle = getattr(stream, attribute, None)
            if isinstance(handle, int):
                return handle
        if hasattr(stream, "__cuda_stream__"):
            return int(stream.__cuda_stream__()[1])
        raise LaunchError(f"a stream is an integer handle, a CuPy or PyTorch stream or a "
                          f"__cuda_stream__ object, not {type(stream).__name__}")
    frameworks = {a.framework for a in arrays}
    if "torch" in frameworks:
        import torch

        return int(torch.cuda.current_stream(device).cuda_stream)
    if "cupy" in frameworks:
        import cupy

        return int(cupy.cuda.get_current_stream().ptr)
    return 0


def run_compiled(done: Compiled, values: list[Any], stream: Any) -> None:
    """Launches ``done`` with ``values`` (its arguments in parameter order: NumPy arrays,
    ``DeviceArray``s and NumPy scalars)."""
    ensure_driver()
    from cuda.bindings import driver as cu

    arrays = [v for v in values if isinstance(v, DeviceArray)]
    devices = {a.device for a in arrays if a.device is not None}
    if len(devices) > 1:
        raise LaunchError("the arrays live on different GPUs: "
                          + ", ".join(f"{a.name} on {a.device}" for a in arrays))
    device = devices.pop() if devices else 0
    _check(cu.cuCtxSetCurrent(_context(device)), "cuCtxSetCurrent")  # in this thread
    function, shared = _function(done, device)
    handle = _stream_handle(stream, arrays, device)
    copies: list[tuple[Any, np.ndarray]] = []
    holders: list[np.ndarray] = []
    try:
        for v in values:
            if isinstance(v, DeviceArray):
                holders.append(np.array([v.ptr], np.uint64))
            elif isinstance(v, np.ndarray):
                ptr = _check(cu.cuMemAlloc(max(v.nbytes, 1)), "cuMemAlloc")
                copies.append((ptr, v))
                if v.nbytes:
                    _check(cu.cuMemcpyHtoDAsync(ptr, v.ctypes.data, v.nbytes, handle),
                           "cuMemcpyHtoDAsync")
                holders.append(np.array([int(ptr)], np.uint64))
            else:
                holders.append(np.array([v]))
        pointers = np.array([h.ctypes.data for h in holders], np.uint64)
        (gx, gy, gz), (bx, by, bz) = done.launch.grid, done.launch.block
        _check(cu.cuLaunchKernel(function, gx, gy, gz, bx, by, bz, shared, handle,
                                 pointers.ctypes.data, 0), "cuLaunchKernel")
        if copies:
            for ptr, host in copies:
                if host.nbytes:
                    _check(cu.cuMemcpyDtoHAsync(host.ctypes.data, ptr, host.nbytes, handle),
                           "cuMemcpyDtoHAsync")
            _check(cu.cuStreamSynchronize(handle), "cuStreamSynchronize")
    finally:
        for ptr, _ in copies:
            cu.cuMemFree(ptr)
