"""Run a kernel on an OpenCL device through pyopencl (PoCL on the CPU, or a GPU's driver).

``run`` mirrors ``sim.simulate``: the same arguments, and every array parameter's final
contents by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from backends.opencl.emit import BUILD_OPTIONS, emit
from sarek import ir
from sarek.dsl import numpy_dtype
from sarek.errors import SarekError


class OpenCLError(SarekError):
    """No OpenCL device, or the device refused the program; ``reason`` carries its log."""


def opencl_available(platform: str = "") -> str | None:
    """None when pyopencl finds a device (on a platform whose name contains ``platform``),
    else the reason it does not."""
    try:
        find_device(platform)
    except OpenCLError as e:
        return e.reason
    return None


def find_device(platform: str = "") -> Any:
    """The first device of the first platform whose name contains ``platform``;
    ``OpenCLError`` naming the platforms there are when none fits."""
    try:
        import pyopencl as cl
    except ImportError as e:
        raise OpenCLError(f"pyopencl is not installed ({e})") from None
    try:
        platforms = cl.get_platforms()
    except Exception as e:  # pyopencl raises its own LogicError when no ICD is found
        raise OpenCLError(f"no OpenCL platform ({e})") from None
    for p in platforms:
        if platform.lower() in p.name.lower():
            devices = p.get_devices()
            if devices:
                return devices[0]
    names = ", ".join(p.name for p in platforms) or "none"
    raise OpenCLError(f"no OpenCL device on a platform named {platform!r} (platforms: {names})")


def _memory(elem: ir.ElemType) -> np.dtype[Any]:
    return np.dtype(np.uint8) if elem is ir.ElemType.BOOL else numpy_dtype(elem)


def run(kernel: ir.Kernel, args: Sequence[Any] | Mapping[str, Any], grid: tuple[int, ...],
        block: tuple[int, ...], platform: str = "") -> dict[str, np.ndarray]:
    """Builds the kernel's OpenCL C for the first device of the first platform whose name
    contains ``platform`` (PoCL on a CPU machine), launches it once and returns every array
    parameter's contents afterwards (bool arrays as bool)."""
    import pyopencl as cl

    device = find_device(platform)
    values = dict(zip([p.name for p in kernel.params], args, strict=True)) if not isinstance(
        args, Mapping) else dict(args)
    ctx = cl.Context([device])
    queue = cl.CommandQueue(ctx)
    try:
        program = cl.Program(ctx, emit(kernel)).build(options=list(BUILD_OPTIONS))
    except cl.RuntimeError as e:
        raise OpenCLError(f"{kernel.name} does not build on {device.name}: {e}") from None
    launch_args: list[Any] = []
    buffers: dict[str, tuple[Any, np.ndarray, ir.ArrayParam]] = {}
    flags = cl.mem_flags
    for p in kernel.params:
        if isinstance(p, ir.ArrayParam):
            host = np.ascontiguousarray(np.asarray(values[p.name], dtype=numpy_dtype(p.elem))
                                        .ravel()).astype(_memory(p.elem))
            buf = cl.Buffer(ctx, flags.READ_WRITE | flags.COPY_HOST_PTR,
                            hostbuf=host if host.nbytes else np.zeros(1, np.uint8))
            buffers[p.name] = (buf, host, p)
            launch_args.append(buf)
        else:
            launch_args.append(_memory(p.elem).type(values[p.name]))
    g, b = (*grid, 1, 1)[:3], (*block, 1, 1)[:3]
    if all(g):
        kern = getattr(program, kernel.name)
        kern(queue, tuple(x * y for x, y in zip(g, b, strict=True)), tuple(b), *launch_args)
    out = {}
    for name, (buf, host, p) in buffers.items():
        result = np.empty_like(host)
        if host.nbytes:
            cl.enqueue_copy(queue, result, buf)
        out[name] = result.astype(np.bool_) if p.elem is ir.ElemType.BOOL else result
    queue.finish()
    return out
