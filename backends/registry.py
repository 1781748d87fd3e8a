"""The target registry: every target sarek prints for, listed once.

A ``Target`` names what the rest of the project needs of a backend: ``lower`` (the neutral
rewrite into the target's own IR, which the simulator executes as printed), ``emit`` (lower,
then print), ``run`` where a device can exist (``None`` otherwise) with ``device_reason``
saying why a device is absent, the gate's ``DeviceSupport`` and the subgroups, fragments and
lowerings the backend prints, the default arithmetic model of its matrix unit in the
simulator, and the staging policy it hands the rewrite.

``targets()`` lists them; ``target(name)`` finds one (``UnknownTarget`` names the choices);
``emit(kernel, name)`` validates the kernel, lowers it and prints it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import cache
from typing import TYPE_CHECKING

from sarek import ir, ir_check
from sarek.errors import SarekError

if TYPE_CHECKING:  # the targets import the compiler when built; names() needs none of it
    from backends.target import Target


class UnknownTarget(SarekError):
    """A target name the registry does not have."""


def _cuda() -> Target:
    from backends.cuda import lower as cuda_lower
    from backends.cuda.emit import print_kernel
    from backends.cuda.run import run, unavailable_reason
    from backends.target import Target
    from sarek.device_support import cuda_support
    from sarek.matrix_scheme import Lowering

    return Target(
        name="cuda",
        description="CUDA C++ through NVRTC: ldmatrix + mma.sync m16n8k16 on tensor cores",
        lower=cuda_lower.lower,
        print_lowered=print_kernel,
        support=lambda: cuda_support(9, 0),
        subgroups=cuda_lower.SUBGROUPS,
        fragments=cuda_lower.FRAGMENTS,
        lowerings=tuple(Lowering),
        arith="h200",
        staging=cuda_lower.STAGING,
        run=run,
        device_reason=unavailable_reason,
    )


def _metal() -> Target:
    from backends.metal import lower as metal_lower
    from backends.metal.emit import print_kernel

    return metal_lower.MetalTarget(
        name="metal",
        description="Metal Shading Language: simdgroup_matrix 8x8 (text, checked by clang "
                    "against a stand-in header; no Metal device or compiler off macOS)",
        lower=metal_lower.lower,
        print_lowered=print_kernel,
        support=metal_lower.support,
        subgroups=metal_lower.SUBGROUPS,
        fragments=metal_lower.FRAGMENTS,
        lowerings=metal_lower.LOWERINGS,
        arith="sequential",
        staging=metal_lower.STAGING,
        device_reason=lambda: "Metal runs only on Apple GPUs under macOS; sarek prints it",
    )


def _opencl_nv() -> Target:
    """CUDA's target with another printer and runner: one lowering, two printers."""
    from backends.cuda import lower as cuda_lower
    from backends.opencl.emit_nv import print_nv
    from backends.opencl.run import nv_available, run_nv

    return replace(
        _made("cuda"), name="opencl-nv",
        description="OpenCL C with inline PTX (the CUDA lowering: ldmatrix + mma.sync "
                    "m16n8k16) through NVIDIA's OpenCL",
        print_lowered=print_nv, run=run_nv, device_reason=nv_available,
        staging=cuda_lower.NV_STAGING)


def _opencl() -> Target:
    from backends.opencl import lower as opencl_lower
    from backends.opencl.emit import print_kernel
    from backends.opencl.run import opencl_available, run
    from backends.target import Target
    from sarek.matrix_scheme import Lowering

    return Target(
        name="opencl",
        description="portable OpenCL C 1.2: fragments emulated lane by lane in local memory "
                    "(PoCL, or the platform $SAREK_OPENCL_PLATFORM names)",
        lower=opencl_lower.lower,
        print_lowered=print_kernel,
        support=opencl_lower.support,
        subgroups=opencl_lower.SUBGROUPS,
        fragments=opencl_lower.FRAGMENTS,
        lowerings=tuple(Lowering),
        arith="sequential",
        staging=opencl_lower.STAGING,
        run=run,
        device_reason=opencl_available,
        unselected=opencl_lower.UNSELECTED,
    )


def _spirv() -> Target:
    from backends.spirv.target import spirv_target

    return spirv_target()


def _vulkan() -> Target:
    from backends.spirv.target import vulkan_target

    return vulkan_target()


_FACTORIES: dict[str, Callable[[], Target]] = {"cuda": _cuda, "metal": _metal,
                                               "opencl-nv": _opencl_nv, "opencl": _opencl,
                                               "spirv": _spirv, "vulkan": _vulkan}


def names() -> tuple[str, ...]:
    """The registered target names."""
    return tuple(_FACTORIES)


def target(name: str) -> Target:
    """The target called ``name``; ``UnknownTarget`` lists the ones there are."""
    if not isinstance(name, str) or name not in _FACTORIES:
        raise UnknownTarget(f"unknown target {name!r}; the targets are {', '.join(names())}")
    return _made(name)


@cache
def _made(name: str) -> Target:
    return _FACTORIES[name]()  # built on first use: a backend imports only when asked for


def targets() -> tuple[Target, ...]:
    """Every registered target."""
    return tuple(target(n) for n in names())


def emit(kernel: ir.Kernel, name: str) -> str:
    """``kernel`` (original or rewritten) printed for target ``name``."""
    return target(name).emit(kernel)


def lower(kernel: ir.Kernel, name: str) -> ir.Kernel:
    """``kernel`` validated and lowered for target ``name`` (what its printer prints and the
    simulator runs with ``target=name``)."""
    ir_check.ensure_valid(kernel)
    return target(name).lower(kernel)
