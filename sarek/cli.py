"""The ``sarek`` command line: ``sarek demo | examples | simulate | analyze | rewrite | emit |
conformance | ir | ir-schema``. Wherever a command takes ``FILE.py:KERNEL``, a bundled
example's name may stand for the file (``gemm_f32:matmul``; ``sarek examples`` lists them)."""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from sarek import demo, ir
from sarek.cli_args import Parser, count, triple
from sarek.demo_rows import compare
from sarek.dsl import KernelFunction
from sarek.errors import SarekError
from sarek.ir_walk import walk
from sarek.launch import Launch
from sarek.loader import (
    MAKE_BYTES_PER_ELEMENT,
    examples_dir,
    load_kernel,
    make_elements,
    user_error,
)
from sarek.schedule import Schedule
from sim.launch import Limits, size_text

if TYPE_CHECKING:
    from sarek.matrix_scheme import Lowering

TRIPLE_OPTIONS = ("--size", "--grid", "--block")
"""Options whose value is X[,Y[,Z]]; ``main`` keeps a negative value (``--size -1,2,3``) as
the value, which argparse would otherwise read as an option, so that it is refused as such."""

def _limits(args: argparse.Namespace) -> Limits:
    """The simulator's limits, as the command line raises them."""
    default = Limits()
    return Limits(invocations=getattr(args, "max_invocations", None) or default.invocations,
                  memory=getattr(args, "max_memory", None) or default.memory,
                  loop_trips=getattr(args, "max_loop_trips", None),
                  trips=getattr(args, "max_trips", None) or default.trips)


def _user(call: Callable[..., Any], what: str, *args: Any, **kwargs: Any) -> Any:
    """Calls the user's function ``call`` (a module's ``make`` or ``reference``): arguments it
    does not take, or an exception it raises, become one error line naming it."""
    try:
        inspect.signature(call).bind(*args, **kwargs)
    except TypeError as e:
        raise SarekError(f"{what} cannot be called with {_show_args(args)}: {e}") from None
    except ValueError:
        pass  # no signature to check (a builtin): the call itself says
    try:
        return call(*args, **kwargs)
    except SarekError:
        raise
    except Exception as e:
        raise SarekError(f"{what} raised {user_error(e)}") from None


def _takes(call: Callable[..., Any], args: tuple[Any, ...]) -> bool:
    try:
        inspect.signature(call).bind(*args)
    except TypeError:
        return False
    except ValueError:  # no signature to check
        return True
    return True


def _show_args(args: tuple[Any, ...]) -> str:
    return f"({', '.join(map(repr, args))})" if args else "no arguments"


def _check_size(args: argparse.Namespace) -> None:
    """Refuses a ``--size`` whose arrays could not be held, before ``make(m, n, k)`` builds
    them: the bundled examples allocate about m*k + k*n + m*n elements per batch."""
    size = getattr(args, "size", None)
    if not isinstance(size, tuple) or getattr(args, "inputs", None) or getattr(
            args, "original", False):  # make() is not called
        return
    m, n, k = size
    need = make_elements(m, n, k) * MAKE_BYTES_PER_ELEMENT
    limit = getattr(args, "max_memory", None) or Limits().memory
    if need > limit:
        hint = ("raise it with --max-memory" if hasattr(args, "max_memory") else
                "sarek simulate and sarek rewrite can raise it with --max-memory")
        raise SarekError(f"--size {m},{n},{k} asks make() for arrays of about "
                         f"{make_elements(m, n, k)} elements ({size_text(need)} at "
                         f"{MAKE_BYTES_PER_ELEMENT} bytes each), more than the memory limit of "
                         f"{size_text(limit)}; {hint}")


def _launch_of(args: argparse.Namespace, *, data: bool = True
               ) -> tuple[ModuleType, KernelFunction, Launch]:
    """The launch the command line describes: ``--inputs`` with ``--grid``/``--block``, or
    the module's own ``make(m, n, k)`` at ``--size``; without either, and when no ``data``
    is needed (a command that prints), a launch built from ``--size`` alone
    (``matrix_mapping.launch_for_sizes``; ``--block`` chooses its block)."""
    module, kern = load_kernel(args.kernel)
    if not args.inputs and not hasattr(module, "make") and not data:
        from sarek.matrix_mapping import launch_for_sizes
        from sarek.matrix_pattern import recognize

        if args.grid:
            raise SarekError("--grid goes with --inputs; from --size the grid is the one that "
                             "covers the sizes")
        gemm = recognize(kern.ir)
        return module, kern, launch_for_sizes(kern.ir, gemm, *args.size, block=args.block)
    if args.inputs:
        if not (args.grid and args.block):
            raise SarekError("--inputs needs --grid and --block")
        values = _inputs(args.inputs, args.max_memory or Limits().memory)
        launch = Launch(kern.ir, values, args.grid, args.block)
    elif hasattr(module, "make"):
        make, what = module.make, f"{args.kernel.partition(':')[0]}: make"
        # make(m, n, k) builds a launch at --size; a make() of no arguments (the ldmatrix
        # example's) has one launch only
        size = () if _takes(make, ()) and not _takes(make, args.size) else args.size
        launch = _user(make, what, *size)
        if not isinstance(launch, Launch):
            raise SarekError(f"{args.kernel}: the module's make() returned a "
                             f"{type(launch).__name__}, not a sarek.launch.Launch")
        if launch.kernel != kern.ir:
            raise SarekError(f"{args.kernel}: the module's make() launches another kernel; "
                             "pass --inputs, --grid and --block")
    else:
        raise SarekError(f"{args.kernel}: give --inputs FILE.npz with --grid and --block "
                         "(the module has no make(m, n, k) to build the arrays; sarek emit, "
                         "and sarek rewrite without --check, work from --size alone)")
    return module, kern, launch


def _inputs(path: str, memory: int) -> dict[str, Any]:
    """The arguments an ``--inputs`` .npz holds by name (0-d arrays as scalars); refuses a file
    that is missing, not an .npz of plain arrays, or larger unpacked than ``memory``."""
    try:
        with zipfile.ZipFile(path) as z:
            unpacked = sum(i.file_size for i in z.infolist())
    except (OSError, zipfile.BadZipFile, ValueError) as e:
        raise SarekError(f"--inputs {path}: not a readable .npz file ({_why(e)})") from None
    if unpacked > memory:
        raise SarekError(f"--inputs {path} unpacks to {size_text(unpacked)}, more than the "
                         f"memory limit of {size_text(memory)}; raise it with --max-memory")
    try:
        with np.load(path, allow_pickle=False) as data:
            values = {k: data[k] for k in data.files}
    except Exception as e:  # NumPy's many ways to say that a member is not a plain array
        raise SarekError(f"--inputs {path}: not an .npz of NumPy arrays ({_why(e)})") from None
    odd = [k for k, v in values.items() if not isinstance(v, np.ndarray)]
    if odd:  # a member not saved by NumPy (np.load gives its raw bytes)
        raise SarekError(f"--inputs {path}: member {odd[0]!r} is not a NumPy array (write the "
                         "file with numpy.savez)")
    return {k: (v.item() if v.ndim == 0 else v) for k, v in values.items()}


def _why(e: BaseException) -> str:
    text = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
    return " ".join(text.split())[:160] or type(e).__name__


def _cmd_simulate(args: argparse.Namespace) -> int:
    module, kern, launch = _launch_of(args)
    out = launch.simulate(limits=_limits(args))
    print(f"{kern.name}: grid {launch.grid} block {launch.block}")
    expected = (_user(module.reference, "reference", launch)
                if hasattr(module, "reference") and not args.inputs else {})
    if not isinstance(expected, dict):
        raise SarekError(f"the module's reference() returned a {type(expected).__name__}, not a "
                         "dict of arrays by name")
    for name, arr in out.items():
        line = f"  {name}: {arr.size} x {arr.dtype}"
        if name in expected:
            line += f", vs reference: {compare(arr, np.asarray(expected[name]))[1]}"
        print(line)
    if args.out:
        try:
            np.savez(args.out, **out)  # type: ignore[arg-type]  # numpy's stubs: allow_pickle
        except OSError as e:
            raise SarekError(f"cannot write {args.out}: {_why(e)}") from None
        print(f"wrote {args.out}")
    return 0


def _cmd_rewrite(args: argparse.Namespace) -> int:
    from sarek.matrix_rewrite import rewrite_launch
    from sarek.matrix_scheme import Lowering

    _, _, launch = _launch_of(args, data=args.check)
    lowering = Lowering(args.lowering) if args.lowering else None
    rw = rewrite_launch(launch, lowering=lowering, precision=args.precision,
                        subgroup=args.subgroup, frag=args.frag,
                        schedule=_schedule(args.schedule))
    kernel = rw.launch.kernel
    if args.json:
        print(kernel.model_dump_json(indent=2))
        return 0
    counts: dict[str, int] = {}
    for s in walk(kernel.body):
        counts[s.kind] = counts.get(s.kind, 0) + 1
    print(f"{launch.kernel.name} -> {kernel.name}")
    print(f"  lowering  {rw.lowering.value} (subgroup {rw.subgroup}, fragment {rw.frag}, "
          f"schedule {rw.schedule.name})")
    print(f"  region    me={rw.region.me} ne={rw.region.ne} ze={rw.region.ze} "
          f"d={rw.region.d} t={rw.region.t}")
    print(f"  launch    grid {rw.launch.grid} block {rw.launch.block} (original: grid "
          f"{launch.grid} block {launch.block})")
    print("  body      " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    if args.check:
        c, limits = rw.gemm.c.array, _limits(args)
        _, how = compare(rw.launch.simulate(subgroup=rw.subgroup, limits=limits)[c],
                              launch.simulate(limits=limits)[c])
        print(f"  check     rewritten vs original, simulated: {how}")
    return 0


def _schedule(name: str | None) -> Schedule | None:
    """The schedule ``--schedule`` names, or None (the policy's choice)."""
    return None if name is None else Schedule.parse(name)


def _preferred(chosen: int | None, offered: tuple[int, ...], usual: int) -> int:
    """What the user chose, else ``usual`` when the target offers it, else its first."""
    if chosen is not None:
        return chosen
    return usual if usual in offered else offered[0]


def _cmd_emit(args: argparse.Namespace) -> int:
    from backends import registry
    from backends.pipeline import compile_launch
    from sarek.matrix_scheme import Lowering

    target = registry.target(args.target)
    if args.original:
        if any(x is not None for x in (args.lowering, args.subgroup, args.frag,
                                       args.schedule)):
            raise SarekError("--original prints the kernel as written; --lowering, --subgroup, "
                             "--frag and --schedule choose a rewrite")
        text = target.emit(load_kernel(args.kernel)[1].ir)
    else:
        _, _, launch = _launch_of(args, data=False)
        # the pair asked for is checked as given; otherwise the target's usual pair, so that a
        # refusal names what the target lacks at the configuration it would run
        compiled = compile_launch(target,
            launch, lowering=Lowering(args.lowering) if args.lowering else None,
            subgroup=_preferred(args.subgroup, target.subgroups, 32),
            frag=_preferred(args.frag, target.fragments, 16), schedule=_schedule(args.schedule))
        if compiled.rewritten is None:
            raise SarekError(f"{compiled.not_rewritten}; --original prints the kernel as written")
        text = "\n".join(step.text for step in compiled.runs)  # a pre-pass first
    if not args.out:
        print(text, end="" if text.endswith("\n") else "\n")
        return 0
    try:
        Path(args.out).write_text(text)
    except OSError as e:
        raise SarekError(f"cannot write {args.out}: {e.strerror}") from None
    print(f"wrote {args.out}")
    return 0


SCHEDULE_HELP = ("the rewrite's schedule, e.g. t64k16 (the seed's), t128k64s2: block tile, "
                 "reduction step, stages in shared memory (default: the target's policy)")
CONFORMANCE_HELP = "run a target's conformance checks against the simulator"


def _conformance(argv: list[str]) -> int:
    """``sarek conformance``: the engine in ``backends.conformance`` defines the arguments and
    runs; imported only for this command (it pulls in rich and the device runners)."""
    from backends import conformance

    p = Parser(prog="sarek conformance", description=CONFORMANCE_HELP)
    conformance.add_arguments(p)
    return conformance.main(p.parse_args(argv))


def _cmd_examples(args: argparse.Namespace) -> int:
    from sarek.loader import bundled_examples

    print(f"The bundled examples ({examples_dir()}); name one as NAME:KERNEL, e.g. "
          "sarek simulate gemm_f32:matmul --size 64,48,32\n")
    for name, about, kernels in bundled_examples():
        print(f"  {name}:{','.join(kernels)}")
        print(f"      {about.replace('``', '')}")
    return 0


def _cmd_ir(args: argparse.Namespace) -> int:
    _, kern = load_kernel(args.kernel)
    print(kern.ir.model_dump_json(indent=2))
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    print(json.dumps(ir.schema(), indent=2))
    return 0


def _lowerings() -> list[Lowering]:
    from sarek.matrix_scheme import Lowering

    return list(Lowering)


def _launch_parser(sub: argparse._SubParsersAction[Parser], name: str,
                   description: str) -> argparse.ArgumentParser:
    """A command taking ``FILE.py:KERNEL`` and a launch (``_launch_of``)."""
    p = sub.add_parser(name, help=description, description=description)
    p.add_argument("kernel", help=KERNEL_HELP)
    p.add_argument("--size", type=triple, default=(64, 64, 64), metavar="M,N,K",
                   help="the module's make(m, n, k) builds the launch at these sizes; "
                   "without make(), commands that only print build it from the sizes "
                   "(default 64,64,64)")
    p.add_argument("--inputs", metavar="FILE.npz",
                   help="every parameter by name (instead of make())")
    p.add_argument("--grid", type=triple, metavar="X,Y,Z",
                   help="the launch's blocks (with --inputs)")
    p.add_argument("--block", type=triple, metavar="X,Y,Z",
                   help="invocations per block (with --inputs; from --size, the block to use)")
    limits = Limits()
    p.add_argument("--max-memory", type=count, metavar="BYTES",
                   help=f"memory the simulator and make() may use (default "
                   f"{size_text(limits.memory)}; 16G is 16 GiB)")
    p.add_argument("--max-invocations", type=count, metavar="N",
                   help=f"invocations a simulated launch may have (default {limits.invocations})")
    p.add_argument("--max-loop-trips", type=count, metavar="N",
                   help="trips one execution of a loop may run in the simulator (default 2^20)")
    p.add_argument("--max-trips", type=count, metavar="N",
                   help=f"trips all loops of a simulated launch may run (default {limits.trips})")
    return p


def _version() -> str:
    """The installed distribution's version (the source tree's when it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sarek")
    except PackageNotFoundError:
        return "0.1.0 (not installed)"


DESCRIPTION = ("Recognize the GEMM nests of GPU kernels written in sarek's Python DSL, rewrite "
               "them onto matrix units, print them for CUDA, OpenCL C, SPIR-V (Vulkan) and "
               "Metal, and simulate every kernel bit-exactly as printed. Wherever a command "
               "takes FILE.py:KERNEL, a bundled example's name may stand for the file "
               "(gemm_f32:matmul); 'sarek examples' lists them. 'sarek COMMAND --help' "
               "describes each command.")
KERNEL_HELP = "FILE.py:KERNEL, or a bundled example NAME:KERNEL (':KERNEL' may be left out " \
              "when the file defines one kernel)"


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="sarek", description=DESCRIPTION)
    p.add_argument("--version", action="version", version=f"sarek {_version()}")
    sub = p.add_subparsers(dest="command", required=True)
    demo_help = ("a few bundled GEMM examples taken through every stage, each checked, in "
                 "well under a minute (sarek conformance runs the full matrix)")
    d = sub.add_parser("demo", help=demo_help, description=demo_help)
    d.add_argument("--size", type=triple, default=demo.SIZE, help="M,N,K (default 70,45,33)")
    d.add_argument("--examples", help="folder of gemm_*.py examples (default: the bundled ones)")
    d.add_argument("--example", action="append", metavar="NAME",
                   help="only this example; may be repeated (default: "
                   f"{', '.join(demo.FEATURED)})")
    d.set_defaults(run=demo.main)
    examples_help = ("list the bundled examples (usable as NAME:KERNEL wherever FILE.py:KERNEL "
                     "is taken)")
    x = sub.add_parser("examples", help=examples_help, description=examples_help)
    x.set_defaults(run=_cmd_examples)
    s = _launch_parser(sub, "simulate", "simulate FILE.py:KERNEL")
    s.add_argument("--out", help="write the arrays after the launch to this .npz")
    s.set_defaults(run=_cmd_simulate)
    r = _launch_parser(sub, "rewrite", "rewrite FILE.py:KERNEL's GEMM onto matrix fragments")
    r.add_argument("--lowering", choices=[x.value for x in _lowerings()],
                   help="the rewrite's lowering (default: the one selected for the operands)")
    r.add_argument("--precision", choices=("accurate", "fast"), default="accurate",
                   help="how the lowering is selected when none is given (default accurate)")
    r.add_argument("--subgroup", type=int, default=32, help="lanes per subgroup (default 32)")
    r.add_argument("--frag", type=int, default=16, help="fragment edge (default 16)")
    r.add_argument("--schedule", help=SCHEDULE_HELP)
    r.add_argument("--check", action="store_true",
                   help="simulate original and rewritten and compare them")
    r.add_argument("--json", action="store_true", help="print the rewritten IR as JSON")
    r.set_defaults(run=_cmd_rewrite)
    from backends import registry

    e = _launch_parser(sub, "emit", "print FILE.py:KERNEL for a target, rewritten onto matrix "
                       "fragments (or as written, with --original)")
    e.add_argument("--target", required=True,
                   help=f"the target to print for: {', '.join(registry.names())}")
    e.add_argument("--lowering", choices=[x.value for x in _lowerings()],
                   help="the rewrite's lowering (default: the one selected for the operands)")
    e.add_argument("--subgroup", type=int,
                   help="lanes per subgroup (default 32, or the target's first if it has not 32)")
    e.add_argument("--frag", type=int,
                   help="fragment edge (default 16, or the target's first if it has not 16)")
    e.add_argument("--schedule", help=SCHEDULE_HELP)
    e.add_argument("--original", action="store_true", help="print the kernel as written")
    e.add_argument("-o", "--out", help="write the text to this file instead of stdout")
    e.set_defaults(run=_cmd_emit)
    # listed here for --help; main() hands its arguments to the engine (_conformance)
    sub.add_parser("conformance", help=CONFORMANCE_HELP, add_help=False)
    i = sub.add_parser("ir", help="print FILE.py:KERNEL's IR as JSON",
                       description="print FILE.py:KERNEL's IR as JSON")
    i.add_argument("kernel", help=KERNEL_HELP)
    i.set_defaults(run=_cmd_ir)
    sc = sub.add_parser("ir-schema", help="print the JSON schema of the kernel IR",
                        description="print the JSON schema of the kernel IR")
    sc.set_defaults(run=_cmd_schema)
    from sarek import analyze  # imported here: it pulls in the recognizer and the gate

    analyze.add_parser(sub)
    return p


def _keep_negative(argv: list[str]) -> list[str]:
    """``--size -1,2,3`` as ``--size=-1,2,3``: argparse would read the value as an option."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else ""
        if a in TRIPLE_OPTIONS and nxt[:1] == "-" and nxt[1:2].isdigit():
            out.append(f"{a}={nxt}")
            i += 2
        else:
            out.append(a)
            i += 1
    return out


def main(argv: list[str] | None = None) -> int:
    """Runs one command; returns the exit status (0 success, 1 a check that failed or a kernel
    refused, 2 bad input: one line on stderr, never a traceback). An exception sarek did not
    expect is reported in one line too, as an internal error, with status 3; set
    ``SAREK_TRACEBACK=1`` to see its traceback instead."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["conformance"]:
            return _conformance(argv[1:])
        args = parser().parse_args(_keep_negative(argv))
        _check_size(args)
        return int(args.run(args))
    except SarekError as e:
        print(f"sarek: error: {_one_line(e.reason)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("sarek: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if os.environ.get("SAREK_TRACEBACK"):
            raise
        if " at " in (where := user_error(e)) and _raised_by_user(e):
            print(f"sarek: error: the kernel file's code raised {where}", file=sys.stderr)
            return 2
        print(f"sarek: internal error: {where} (set SAREK_TRACEBACK=1 for the traceback)",
              file=sys.stderr)
        return 3


def _raised_by_user(e: BaseException) -> bool:
    """Whether ``e`` came from a user's module (``FILE.py``'s own ``make``, say): its
    traceback passes through the module after the last frame of sarek's own packages."""
    tb, user, ours, i = e.__traceback__, -1, -1, 0
    while tb is not None:
        name = str(tb.tb_frame.f_globals.get("__name__", ""))
        if name.startswith("sarek_user_"):
            user = i
        elif name.split(".")[0] in ("sarek", "sim", "backends"):
            ours = i
        tb, i = tb.tb_next, i + 1
    return user > ours


def _one_line(text: str) -> str:
    """A reason that spans lines (an IRError lists its problems) folded into one."""
    return "; ".join(re.sub(r"^\s*- ", "", part).strip() for part in text.splitlines()
                     if part.strip())


if __name__ == "__main__":
    sys.exit(main())
