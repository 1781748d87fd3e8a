"""``sarek analyze FILE.py:KERNEL``: the recognized GEMM, its region, lowering and gate verdict.

The launch comes from ``--grid``, ``--block`` and ``--args NAME=VALUE ...`` (scalars only: the
region needs no array), or, when those are absent, from the module's ``make(*--size)`` or,
without one, from the sizes alone (``matrix_mapping.launch_for_sizes``).

The gate is the one of ``--target`` (a name of ``backends.registry``, as ``emit`` and
``conformance`` take it), asked about the configuration that target multiplies with; a device
option puts another device of the same target before it: ``--device h200`` (vulkan, spirv),
``--compute-capability X.Y`` (cuda, opencl-nv), ``--apple-family N`` (metal).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from sarek import coopmat, device_support, ir, matrix_mapping, matrix_pattern, matrix_scheme
from sarek.cli_args import apple_family, compute_capability, scalar, triple
from sarek.errors import SarekError
from sarek.loader import load_kernel

if TYPE_CHECKING:
    from backends.target import Target

DEFAULT_TARGET = "vulkan"

DEVICE_OPTIONS: dict[str, tuple[str, ...]] = {
    "device": ("vulkan", "spirv"),
    "compute_capability": ("cuda", "opencl-nv"),
    "apple_family": ("metal",),
}
"""Each device option and the targets whose device it describes."""


def add_parser(subparsers: Any) -> None:
    """Adds the ``analyze`` command to the CLI's subparsers."""
    from backends import registry

    about = ("recognize FILE.py:KERNEL's GEMM nest and show its region, lowering and device "
             "gate verdict")
    a = subparsers.add_parser("analyze", help=about, description=about)
    a.add_argument("kernel", help="FILE.py:KERNEL, or a bundled example NAME:KERNEL")
    a.add_argument("--grid", type=triple, help="X,Y,Z blocks")
    a.add_argument("--block", type=triple, help="X,Y,Z invocations per block")
    a.add_argument("--args", type=scalar, nargs="*", default=[], metavar="NAME=VALUE",
                   help="scalar arguments of the launch")
    a.add_argument("--size", type=triple, default=(64, 64, 64),
                   help="M,N,K for the module's make(), or the sizes a launch is built from, "
                   "when no launch is given (default 64,64,64)")
    a.add_argument("--precision", choices=("accurate", "fast"), default="accurate",
                   help="how the lowering is selected (default accurate)")
    a.add_argument("--frag", type=int,
                   help="fragment edge, 16 or 8 (default 16, or the target's own if it has not "
                   "16)")
    a.add_argument("--target", default=DEFAULT_TARGET,
                   help=f"whose gate: {', '.join(registry.names())} (default {DEFAULT_TARGET}: "
                   "the Vulkan device here, else the list recorded on the H200)")
    a.add_argument("--device", choices=("h200",),
                   help="vulkan, spirv: the cooperative-matrix list recorded on the H200, even "
                   "where a Vulkan device is here")
    a.add_argument("--compute-capability", type=compute_capability, metavar="X.Y",
                   help="cuda, opencl-nv: an NVIDIA GPU of this compute capability (8.0, "
                   "sm_90; default 9.0)")
    a.add_argument("--apple-family", type=apple_family, metavar="N",
                   help="metal: an Apple GPU of family N (7 or apple7; default 7)")
    a.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Prints the analysis; returns 0 when a lowering is available on the target, 1 when the
    kernel is refused, has no lowering or the gate does not permit it."""
    target = _target(args.target)
    support = _support(args, target)
    module, kern = load_kernel(args.kernel)
    try:
        gemm = matrix_pattern.recognize(kern.ir)
    except matrix_pattern.NotAGemm as e:
        print(f"{kern.name}: not a GEMM nest: {e.reason}")
        return 1
    print(gemm.describe())
    launch: tuple[Any, ...] | None = None
    try:
        launch = _launch(args, module, kern, gemm)
    except matrix_mapping.RegionError as e:  # the sizes alone do not give a launch
        print(f"region        (no launch: {e.reason})")
    if launch is not None:
        grid, block, values = launch
        try:
            reg = matrix_mapping.region(gemm, grid, block, values)
            print(f"region        grid {grid} block {block}: me={reg.me} ne={reg.ne} "
                  f"ze={reg.ze} d={reg.d} t={reg.t}")
        except SarekError as e:
            print(f"region        refused: {e.reason}")
    frag = args.frag if args.frag is not None else (
        16 if 16 in target.fragments else target.fragments[0])
    try:
        low = matrix_scheme.select(gemm, args.precision)
        config = _config(target, low, gemm.operand_elt, frag)
    except SarekError as e:
        print(f"lowering      none: {e.reason}")
        return 1
    print(f"lowering      {matrix_scheme.lowering_name(low)} ({args.precision}); "
          f"configuration {config}")
    if low in target.unselected:
        print(f"target        {target.name} runs it as written unless asked for "
              f"{matrix_scheme.lowering_name(low)} by name: {target.unselected[low]}")
    verdict = coopmat.verdict(config, support)
    match verdict:
        case coopmat.Available(note=note):
            print(f"gate          {support.device}: available" + (f" ({note})" if note else ""))
            return 0
        case coopmat.Unavailable(reason=why) | coopmat.Unknown(reason=why):
            print(f"gate          {type(verdict).__name__.lower()}: {why}")
    return 1


def _target(name: str) -> Target:
    """The registry's target ``name``; a spelling ``analyze --target`` took before it took the
    registry's names is refused with the one that replaces it."""
    from backends import registry

    match name.partition(":"):
        case ("vulkan-h200", "", ""):
            spelled = "--target vulkan --device h200"
        case ("cuda", ":", capability):
            spelled = f"--target cuda --compute-capability {capability}"
        case ("metal", ":", family):
            spelled = f"--target metal --apple-family {family}"
        case _:
            return registry.target(name)
    raise SarekError(f"--target {name} is now spelled {spelled} (analyze takes the targets of "
                     f"emit and conformance: {', '.join(registry.names())})")


def _support(args: argparse.Namespace, target: Target) -> coopmat.DeviceSupport:
    """The device the gate consults: the one a device option names, else the target's."""
    for option, targets in DEVICE_OPTIONS.items():
        if getattr(args, option) is not None and target.name not in targets:
            raise SarekError(f"--{option.replace('_', '-')} describes a device of "
                             f"{' or '.join(targets)}, not of {target.name}")
    if args.device == "h200":
        return device_support.recorded_h200_vulkan()
    if args.compute_capability is not None:
        return device_support.cuda_support(*args.compute_capability)
    if args.apple_family is not None:
        return device_support.metal_support(args.apple_family)
    return target.support()


def _config(target: Target, lowering: matrix_scheme.Lowering, operand: ir.ElemType,
            frag: int) -> coopmat.Config:
    """The configuration ``target`` multiplies ``lowering`` with at ``frag``: 8-bit operands
    of 16x16 fragments reduce as deep as its staging says; the byte planes multiply s32 words
    where its staging multiplies them whole."""
    whole = target.staging.whole_int32
    neutral = matrix_scheme.config_of(lowering, operand, frag, whole_int32=whole)
    deep = target.staging.byte_k if neutral.a.bits == 8 and frag == 16 else None
    return matrix_scheme.config_of(lowering, operand, frag, deep, whole_int32=whole)


def _launch(args: argparse.Namespace, module: Any, kern: Any, gemm: matrix_pattern.Gemm
            ) -> tuple[tuple[int, int, int], tuple[int, int, int], Any]:
    """The launch's grid, block and arguments: ``--grid``, ``--block`` and ``--args``, else
    the module's ``make(*--size)``, else the sizes alone; ``RegionError`` when there is none."""
    if args.grid or args.block or args.args:
        if not (args.grid and args.block):
            raise SarekError("--args needs --grid and --block")
        return args.grid, args.block, dict(args.args)
    if hasattr(module, "make"):
        launch = module.make(*args.size)
        if launch.kernel != kern.ir:
            raise matrix_mapping.RegionError("the module's make() launches another kernel; "
                                             "give --grid, --block and --args")
        return launch.grid, launch.block, dict(launch.args)
    launch = matrix_mapping.launch_for_sizes(kern.ir, gemm, *args.size)
    return launch.grid, launch.block, dict(launch.args)
