"""Run a kernel on an NVIDIA GPU through the CUDA driver API (``cuda-bindings``).

``run`` mirrors ``sim.simulate``: the same arguments, and every array parameter's final
contents by name, so that a device and the simulator can be compared bit for bit.
``launch_steps`` and ``time_steps`` run a sequence of kernels (a conversion pre-pass, then
the GEMM) over one set of device arrays, the temporaries included.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from backends.cuda.nvrtc import compile_cubin, nvrtc_available
from backends.cuda.tma import Request, encode
from sarek import ir
from sarek.dtypes import numpy_dtype
from sarek.errors import SarekError


class CudaError(SarekError):
    """A CUDA driver call failed."""


def _check(result: Any, what: str) -> Any:
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise CudaError(f"{what} failed: {err}")
    return rest[0] if len(rest) == 1 else tuple(rest)


def unavailable_reason() -> str | None:
    """None when a CUDA device can run kernels here (``cuda-bindings``, a driver, a device and
    NVRTC), else one line saying what is missing. Never raises."""
    return driver_reason() or nvrtc_available()


def driver_reason() -> str | None:
    """None when the CUDA driver and a device are there (``cuda-bindings`` too), else one line
    saying what is missing. Never raises."""
    try:
        from cuda.bindings import driver as cu
    except ImportError as e:
        return f"cuda-bindings is not installed ({e}); pip install 'sarek[cuda]'"
    try:
        err = cu.cuInit(0)[0]
        if int(err) != 0:
            return f"the CUDA driver does not initialize ({err})"
        err, count = cu.cuDeviceGetCount()
    except Exception as e:  # the bindings load the driver library on first use
        return f"no CUDA driver ({type(e).__name__}: {e})".splitlines()[0]
    if int(err) != 0 or int(count) == 0:
        return "no CUDA device" + (f" ({err})" if int(err) != 0 else "")
    return None


@cache
def device_arch(device: int = 0) -> str:
    """``sm_XY`` of ``device`` (device 0 by default)."""
    from cuda.bindings import driver as cu

    _check(cu.cuInit(0), "cuInit")
    dev = _check(cu.cuDeviceGet(device), "cuDeviceGet")
    attr = cu.CUdevice_attribute
    major = _check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                           dev), "cuDeviceGetAttribute")
    minor = _check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                           dev), "cuDeviceGetAttribute")
    return f"sm_{major}{minor}"


def device_name() -> str:
    from cuda.bindings import driver as cu

    _check(cu.cuInit(0), "cuInit")
    dev = _check(cu.cuDeviceGet(0), "cuDeviceGet")
    raw = _check(cu.cuDeviceGetName(64, dev), "cuDeviceGetName")
    return bytes(raw).split(b"\0", 1)[0].decode()


def run(kernel: ir.Kernel, args: Sequence[Any] | Mapping[str, Any], grid: tuple[int, ...],
        block: tuple[int, ...], arch: str | None = None) -> dict[str, np.ndarray]:
    """Compiles ``kernel``'s CUDA with NVRTC for this device (or ``arch``), launches it once on
    device 0 and returns every array parameter's contents afterwards."""
    values = dict(zip([p.name for p in kernel.params], args, strict=True)) if not isinstance(
        args, Mapping) else dict(args)
    from backends.cuda.emit import emit
    from backends.cuda.shared import dynamic_bytes

    cubin = compile_cubin(emit(kernel), arch or device_arch(), f"{kernel.name}.cu")
    params: list[np.ndarray | np.generic] = []
    for p in kernel.params:
        dt = numpy_dtype(p.elem)
        if isinstance(p, ir.ArrayParam):
            params.append(np.asarray(values[p.name], dtype=dt))
        else:
            params.append(dt.type(values[p.name]))
    from backends.cuda.lower import lower
    from backends.cuda.tma import requests

    lowered = lower(kernel)  # its shared arrays, those the lowering adds included
    out = launch_cubin(cubin, kernel.name, params, grid, block, dynamic_bytes(lowered),
                       requests(lowered, values))
    return {p.name: arr for p, arr in zip(kernel.params, out, strict=True)
            if isinstance(p, ir.ArrayParam) and arr is not None}


@dataclass
class _Loaded:
    """A kernel loaded on device 0 with its parameters on the device."""

    function: Any
    pointers: np.ndarray  # the kernel-parameter pointer array cuLaunchKernel takes
    shared_bytes: int  # dynamic shared memory per block

    def launch(self, grid: tuple[int, ...], block: tuple[int, ...]) -> None:
        from cuda.bindings import driver as cu

        g, b = (*grid, 1, 1)[:3], (*block, 1, 1)[:3]
        if all(g):
            _check(cu.cuLaunchKernel(self.function, *g, *b, self.shared_bytes, 0,
                                     self.pointers.ctypes.data, 0), "cuLaunchKernel")


def _one(cubin: bytes, name: str, params: Sequence[np.ndarray | np.generic],
         grid: tuple[int, ...], block: tuple[int, ...], shared_bytes: int,
         maps: Sequence[Request]) -> tuple[Launchable, dict[str, np.ndarray | np.generic]]:
    """A kernel and its parameters in order as a sequence of one (the parameters named by
    their positions)."""
    names = tuple(f"p{i}" for i in range(len(params)))
    return (Launchable(cubin, name, names, grid, block, shared_bytes, tuple(maps)),
            dict(zip(names, params, strict=True)))


def launch_cubin(cubin: bytes, name: str, params: Sequence[np.ndarray | np.generic],
                 grid: tuple[int, ...], block: tuple[int, ...], shared_bytes: int = 0,
                 maps: Sequence[Request] = ()) -> list[np.ndarray | None]:
    """Launches kernel ``name`` of ``cubin`` once on device 0 with ``shared_bytes`` of dynamic
    shared memory (``backends.cuda.shared.dynamic_bytes``): an array parameter is copied to
    the device and its contents after the launch come back (in the same position of the
    result), a NumPy scalar is passed by value (None in the result); ``maps`` are the tensor
    maps that follow the parameters."""
    step, values = _one(cubin, name, params, grid, block, shared_bytes, maps)
    out = launch_steps([step], values)
    return [out.get(n) for n in step.params]


def time_cubin(cubin: bytes, name: str, params: Sequence[np.ndarray | np.generic],
               grid: tuple[int, ...], block: tuple[int, ...], repeats: int = 10,
               shared_bytes: int = 0, together: int = 1, maps: Sequence[Request] = ()
               ) -> list[float]:
    """Seconds per launch of kernel ``name`` over the same device copies of ``params``, timed
    with CUDA events after one warm-up launch: one figure per repeat, each the mean of
    ``together`` launches issued back to back between two events."""
    step, values = _one(cubin, name, params, grid, block, shared_bytes, maps)
    return time_steps([step], values, repeats, together)


@dataclass(frozen=True)
class Launchable:
    """One kernel of a sequence as ``launch_steps`` and ``time_steps`` launch it: its cubin
    and name, its parameters' names in order, its grid and block, its dynamic shared memory
    and the tensor maps after its parameters."""

    cubin: bytes
    name: str
    params: tuple[str, ...]
    grid: tuple[int, ...]
    block: tuple[int, ...]
    shared_bytes: int = 0
    maps: tuple[Request, ...] = ()


@contextmanager
def _sequence(steps: Sequence[Launchable], values: Mapping[str, np.ndarray | np.generic]
              ) -> Iterator[tuple[list[_Loaded], dict[str, tuple[Any, np.ndarray]]]]:
    """Every array of ``values`` copied to device 0 once, and each step loaded over those
    copies (its scalars from ``values`` by name); frees everything afterwards."""
    from cuda.bindings import driver as cu

    _check(cu.cuInit(0), "cuInit")
    dev = _check(cu.cuDeviceGet(0), "cuDeviceGet")
    _check(cu.cuCtxSetCurrent(_check(cu.cuDevicePrimaryCtxRetain(dev),
                                     "cuDevicePrimaryCtxRetain")), "cuCtxSetCurrent")
    arrays: dict[str, tuple[Any, np.ndarray]] = {}
    modules: list[Any] = []
    kept: list[list[np.ndarray]] = []
    try:
        for name, value in values.items():
            if isinstance(value, np.ndarray):
                host = np.ascontiguousarray(value).ravel()
                ptr = _check(cu.cuMemAlloc(max(host.nbytes, 1)), "cuMemAlloc")
                arrays[name] = (ptr, host)
                if host.nbytes:
                    _check(cu.cuMemcpyHtoD(ptr, host.ctypes.data, host.nbytes), "cuMemcpyHtoD")
        loaded = []
        for step in steps:
            module = _check(cu.cuModuleLoadData(step.cubin), "cuModuleLoadData")
            modules.append(module)
            function = _check(cu.cuModuleGetFunction(module, step.name.encode()),
                              "cuModuleGetFunction")
            if step.shared_bytes:
                _check(cu.cuFuncSetAttribute(
                    function,
                    cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    step.shared_bytes), "cuFuncSetAttribute")
            holders = [np.array([int(arrays[n][0])], np.uint64) if n in arrays
                       else np.array([values[n]]) for n in step.params]
            holders += [encode(r, int(arrays[step.params[r.param]][0])) for r in step.maps]
            pointers = np.array([h.ctypes.data for h in holders], dtype=np.uint64)
            loaded.append(_Loaded(function, pointers, step.shared_bytes))
            kept.append(holders)  # the slots the pointers name, alive until the end
        yield loaded, arrays
    finally:
        for ptr, _ in arrays.values():
            cu.cuMemFree(ptr)
        for module in modules:
            cu.cuModuleUnload(module)


def launch_steps(steps: Sequence[Launchable], values: Mapping[str, np.ndarray | np.generic]
                 ) -> dict[str, np.ndarray]:
    """Launches ``steps`` once, in order, on device 0 over copies of the arrays of ``values``
    (by parameter name; the temporaries among them too) and returns every array's contents
    afterwards."""
    from cuda.bindings import driver as cu

    with _sequence(steps, values) as (loaded, arrays):
        for step, k in zip(steps, loaded, strict=True):
            k.launch(step.grid, step.block)
        _check(cu.cuCtxSynchronize(), "cuCtxSynchronize")
        out = {}
        for name, (ptr, host) in arrays.items():
            result = np.empty_like(host)
            if host.nbytes:
                _check(cu.cuMemcpyDtoH(result.ctypes.data, ptr, host.nbytes), "cuMemcpyDtoH")
            out[name] = result
        return out


def time_steps(steps: Sequence[Launchable], values: Mapping[str, np.ndarray | np.generic],
               repeats: int = 10, together: int = 1) -> list[float]:
    """Seconds per run of the whole sequence ``steps`` over the same device copies of
    ``values``, timed with CUDA events around its launches after one warm-up run: one figure
    per repeat, each the mean of ``together`` runs issued back to back between two events."""
    from cuda.bindings import driver as cu

    with _sequence(steps, values) as (loaded, _):
        start, stop = (_check(cu.cuEventCreate(0), "cuEventCreate") for _ in range(2))
        times = []
        for i in range(repeats + 1):
            _check(cu.cuEventRecord(start, 0), "cuEventRecord")
            for _ in range(together):
                for step, k in zip(steps, loaded, strict=True):
                    k.launch(step.grid, step.block)
            _check(cu.cuEventRecord(stop, 0), "cuEventRecord")
            _check(cu.cuEventSynchronize(stop), "cuEventSynchronize")
            ms = _check(cu.cuEventElapsedTime(start, stop), "cuEventElapsedTime")
            if i:  # the first run warms up
                times.append(float(ms) / 1e3 / together)
        return times
