"""``sarek analyze FILE.py:KERNEL``: the recognized GEMM, its region, lowering and gate verdict.

The launch comes from ``--grid``, ``--block`` and ``--args NAME=VALUE ...`` (scalars only: the
region needs no array), or, when those are absent and the module defines ``make(m, n, k)``, from
``make(*--size)``. Without a launch the region is skipped.
"""

from __future__ import annotations

import argparse
from typing import Any

from sarek import coopmat, matrix_mapping, matrix_pattern, matrix_scheme
from sarek.errors import SarekError
from sarek.launch import dim3
from sarek.loader import load_kernel


def _triple(text: str) -> tuple[int, int, int]:
    try:
        return dim3([int(x) for x in text.split(",")])
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected X[,Y[,Z]] integers, got {text!r}") from None


def _scalar(text: str) -> tuple[str, int | float]:
    name, eq, value = text.partition("=")
    if not eq or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    try:
        return name, int(value)
    except ValueError:
        try:
            return name, float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None


def add_parser(subparsers: Any) -> None:
    """Adds the ``analyze`` command to the CLI's subparsers."""
    a = subparsers.add_parser("analyze", help="recognize FILE.py:KERNEL's GEMM nest and show its "
                              "region, lowering and device gate verdict")
    a.add_argument("kernel", help="FILE.py:KERNEL")
    a.add_argument("--grid", type=_triple, help="X,Y,Z blocks")
    a.add_argument("--block", type=_triple, help="X,Y,Z invocations per block")
    a.add_argument("--args", type=_scalar, nargs="*", default=[], metavar="NAME=VALUE",
                   help="scalar arguments of the launch")
    a.add_argument("--size", type=_triple, default=(64, 64, 64),
                   help="M,N,K for the module's make() when no launch is given (default 64)")
    a.add_argument("--precision", choices=("accurate", "fast"), default="accurate")
    a.add_argument("--frag", type=int, default=16, help="fragment edge (16 or 8)")
    a.add_argument("--target", default="vulkan-h200",
                   help="opencl, vulkan-h200 (recorded), vulkan (probe), cuda:8.0, "
                   "metal:apple7, unprobed:NAME (default vulkan-h200)")
    a.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Prints the analysis; returns 0 when a lowering is available on the target, 1 when the
    kernel is refused, has no lowering or the gate does not permit it."""
    module, kern = load_kernel(args.kernel)
    try:
        gemm = matrix_pattern.recognize(kern.ir)
    except matrix_pattern.NotAGemm as e:
        print(f"{kern.name}: not a GEMM nest: {e.reason}")
        return 1
    print(gemm.describe())
    launch = _launch(args, module, kern)
    if launch is None:
        print("region        (no launch: give --grid, --block and --args)")
    else:
        grid, block, values = launch
        try:
            reg = matrix_mapping.region(gemm, grid, block, values)
            print(f"region        grid {grid} block {block}: me={reg.me} ne={reg.ne} "
                  f"ze={reg.ze} d={reg.d} t={reg.t}")
        except SarekError as e:
            print(f"region        refused: {e.reason}")
    try:
        low = matrix_scheme.select(gemm, args.precision)
        config = matrix_scheme.config_of(low, gemm.operand_elt, args.frag)
    except SarekError as e:
        print(f"lowering      none: {e.reason}")
        return 1
    print(f"lowering      {matrix_scheme.lowering_name(low)} ({args.precision}); "
          f"configuration {config}")
    support = coopmat.named_support(args.target)
    verdict = coopmat.verdict(config, support)
    match verdict:
        case coopmat.Available():
            print(f"gate          {support.device}: available")
            return 0
        case coopmat.Unavailable(reason=why) | coopmat.Unknown(reason=why):
            print(f"gate          {type(verdict).__name__.lower()}: {why}")
    return 1


def _launch(args: argparse.Namespace, module: Any, kern: Any
            ) -> tuple[tuple[int, int, int], tuple[int, int, int], Any] | None:
    if args.grid or args.block or args.args:
        if not (args.grid and args.block):
            raise SarekError("--args needs --grid and --block")
        return args.grid, args.block, dict(args.args)
    if hasattr(module, "make"):
        launch = module.make(*args.size)
        if launch.kernel == kern.ir:
            return launch.grid, launch.block, dict(launch.args)
    return None
