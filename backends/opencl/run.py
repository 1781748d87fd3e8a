"""Run a kernel on an OpenCL device through pyopencl (PoCL on the CPU, or a GPU's driver).

``run`` (portable OpenCL C) and ``run_nv`` (OpenCL C with NVIDIA inline PTX) mirror
``sim.simulate``: the same arguments, and every array parameter's final contents by name.

Which platform the portable target runs on: the ``platform`` argument, else the environment
variable ``SAREK_OPENCL_PLATFORM`` (a part of the platform's name, any case: ``NVIDIA``,
``Portable``), else the first platform that has a device. ``run_nv`` always takes NVIDIA's.

On a CPU device (PoCL) programs are built with ``-cl-opt-disable`` unless
``SAREK_OPENCL_OPTIMIZE`` is set: PoCL turns every barrier region of a kernel into a loop over
the work-group's work-items and then runs LLVM's whole optimization and vectorization pipeline
over the result, which makes a rewritten kernel's first launch take seconds, and some far
longer (at 256^3 the rewrites of ``gemm_f16``, ``gemm_i32`` and ``gemm_i8`` 1.3 to 6.3 s,
against 0.3 to 1.1 s unoptimized; Bf16x3 at subgroup 32 and fragment 8 not done in 400 s;
``bench/opencl_speed.py``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from backends.opencl.emit import BUILD_OPTIONS, emit
from backends.opencl.emit_nv import emit_nv
from sarek import ir
from sarek.dtypes import numpy_dtype
from sarek.errors import SarekError

PLATFORM_VARIABLE = "SAREK_OPENCL_PLATFORM"
OPTIMIZE_VARIABLE = "SAREK_OPENCL_OPTIMIZE"
NVIDIA = "NVIDIA"  # a part of the name of NVIDIA's OpenCL platform ("NVIDIA CUDA")


class OpenCLError(SarekError):
    """No OpenCL device, or the device refused the program; ``reason`` carries its log."""


def chosen_platform(platform: str | None = None) -> str:
    """The part of a platform name the portable target looks for: ``platform``, else
    ``$SAREK_OPENCL_PLATFORM``, else "" (the first platform with a device)."""
    return platform if platform is not None else os.environ.get(PLATFORM_VARIABLE, "")


def opencl_available(platform: str | None = None) -> str | None:
    """None when pyopencl finds a device (on a platform whose name contains ``platform``,
    ``$SAREK_OPENCL_PLATFORM`` by default), else the reason it does not."""
    try:
        find_device(chosen_platform(platform))
    except OpenCLError as e:
        return e.reason
    return None


def nv_available() -> str | None:
    """None when NVIDIA's OpenCL has a device, else the reason (opencl-nv needs it: its inline
    PTX is for NVIDIA's compiler alone)."""
    return opencl_available(NVIDIA)


def find_device(platform: str = "") -> Any:
    """The first device of the first platform whose name contains ``platform``;
    ``OpenCLError`` naming the platforms there are when none fits."""
    try:
        import pyopencl as cl
    except ImportError as e:
        raise OpenCLError(f"pyopencl is not installed ({e}); pip install 'sarek[opencl]'"
                          ) from None
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


def device_label(platform: str | None = None) -> str:
    """The device the portable target runs on, as a person reads it (its platform too)."""
    device = find_device(chosen_platform(platform))
    return f"{device.name.strip()} ({device.platform.name.strip()})"


def build_options(device: Any) -> list[str]:
    """The options a program is built with on ``device`` (module docstring)."""
    import pyopencl as cl

    options = list(BUILD_OPTIONS)
    if device.type & cl.device_type.CPU and not os.environ.get(OPTIMIZE_VARIABLE):
        options.append("-cl-opt-disable")
    return options


def _memory(elem: ir.ElemType) -> np.dtype[Any]:
    return np.dtype(np.uint8) if elem is ir.ElemType.BOOL else numpy_dtype(elem)


def run(kernel: ir.Kernel, args: Sequence[Any] | Mapping[str, Any], grid: tuple[int, ...],
        block: tuple[int, ...], platform: str | None = None) -> dict[str, np.ndarray]:
    """Prints ``kernel`` (original or rewritten) as portable OpenCL C, builds it for the first
    device of the chosen platform (``chosen_platform``: PoCL on a CPU machine), launches it
    once and returns every array parameter's contents afterwards (bool arrays as bool)."""
    return launch(emit(kernel), kernel, args, grid, block, chosen_platform(platform))


def run_nv(kernel: ir.Kernel, args: Sequence[Any] | Mapping[str, Any], grid: tuple[int, ...],
           block: tuple[int, ...]) -> dict[str, np.ndarray]:
    """Prints ``kernel`` as OpenCL C with NVIDIA inline PTX (``emit_nv``), builds it with
    NVIDIA's OpenCL, launches it once and returns every array parameter's contents."""
    return launch(emit_nv(kernel), kernel, args, grid, block, NVIDIA)


def time_nv(kernel: ir.Kernel, args: Sequence[Any] | Mapping[str, Any], grid: tuple[int, ...],
            block: tuple[int, ...], repeats: int = 10, source: str | None = None
            ) -> tuple[dict[str, np.ndarray], list[float]]:
    """Launches ``kernel`` printed for opencl-nv ``repeats + 1`` times over the same buffers on
    NVIDIA's OpenCL (the first warms up) and returns every array parameter's contents after
    the last and the seconds of each timed launch (the queue's profiling timestamps).
    ``source``: OpenCL C to build instead of the printed text (for experiments on the
    printer; its kernel's interface must be ``kernel``'s)."""
    import pyopencl as cl

    device = find_device(NVIDIA)
    ctx = cl.Context([device])
    queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    text = emit_nv(kernel) if source is None else source
    try:
        program = cl.Program(ctx, text).build(options=build_options(device))
    except cl.RuntimeError as e:
        raise OpenCLError(f"{kernel.name} does not build on {device.name}: {e}") from None
    values = dict(args) if isinstance(args, Mapping) else dict(
        zip([p.name for p in kernel.params], args, strict=True))
    hosts: dict[str, np.ndarray] = {}
    launch_args: list[Any] = []
    for p in kernel.params:
        if isinstance(p, ir.ArrayParam):
            host = np.ascontiguousarray(np.asarray(values[p.name], dtype=numpy_dtype(p.elem))
                                        .ravel()).astype(_memory(p.elem))
            hosts[p.name] = host
            launch_args.append(cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                                         hostbuf=host if host.nbytes else np.zeros(1, np.uint8)))
        else:
            launch_args.append(_memory(p.elem).type(values[p.name]))
    g, b = (*grid, 1, 1)[:3], (*block, 1, 1)[:3]
    size = tuple(x * y for x, y in zip(g, b, strict=True))
    kern = getattr(program, kernel.name)
    seconds: list[float] = []
    for _ in range(repeats + 1):
        event = kern(queue, size, tuple(b), *launch_args)
        event.wait()
        seconds.append((event.profile.end - event.profile.start) * 1e-9)
    out = {}
    for (name, host), buf in zip(hosts.items(), (a for a in launch_args
                                                  if isinstance(a, cl.Buffer)), strict=True):
        result = np.empty_like(host)
        if host.nbytes:
            cl.enqueue_copy(queue, result, buf)
        out[name] = result.astype(np.bool_) if kernel.param(name).elem is ir.ElemType.BOOL \
            else result
    queue.finish()
    return out, seconds[1:]


def launch(source: str, kernel: ir.Kernel, args: Sequence[Any] | Mapping[str, Any],
           grid: tuple[int, ...], block: tuple[int, ...], platform: str = ""
           ) -> dict[str, np.ndarray]:
    """Builds ``source`` (``kernel`` printed for OpenCL) on the first device of the first
    platform whose name contains ``platform``, launches ``kernel`` once over ``grid`` blocks
    of ``block`` work-items and returns every array parameter's contents afterwards."""
    import pyopencl as cl

    device = find_device(platform)
    values = dict(zip([p.name for p in kernel.params], args, strict=True)) if not isinstance(
        args, Mapping) else dict(args)
    ctx = cl.Context([device])
    queue = cl.CommandQueue(ctx)
    try:
        program = cl.Program(ctx, source).build(options=build_options(device))
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
        try:
            kern(queue, tuple(x * y for x, y in zip(g, b, strict=True)), tuple(b), *launch_args)
        except cl.Error as e:
            raise OpenCLError(f"{kernel.name} does not launch on {device.name}: {e}") from None
    out = {}
    for name, (buf, host, p) in buffers.items():
        result = np.empty_like(host)
        if host.nbytes:
            cl.enqueue_copy(queue, result, buf)
        out[name] = result.astype(np.bool_) if p.elem is ir.ElemType.BOOL else result
    queue.finish()
    return out
