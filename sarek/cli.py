"""The ``sarek`` command line: ``sarek demo | simulate | ir | ir-schema``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from sarek import demo, ir
from sarek.errors import SarekError
from sarek.launch import Launch, dim3
from sarek.loader import examples_dir, load_kernel


def _triple(text: str) -> tuple[int, int, int]:
    try:
        return dim3([int(x) for x in text.split(",")])
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected X[,Y[,Z]] integers, got {text!r}") from None


def _cmd_demo(args: argparse.Namespace) -> int:
    rows = demo.run(Path(args.examples) if args.examples else examples_dir(), args.size)
    print(f"Simulated every bundled GEMM example at m x n x k = {'x'.join(map(str, args.size))} "
          "and compared it bit for bit with an independent NumPy computation:\n")
    print(demo.table(rows))
    failed = [r for r in rows if not r.ok]
    print(f"\n{len(rows) - len(failed)} of {len(rows)} examples agree with NumPy.")
    return 1 if failed else 0


def _cmd_simulate(args: argparse.Namespace) -> int:
    module, kern = load_kernel(args.kernel)
    if args.inputs:
        if not (args.grid and args.block):
            raise SarekError("--inputs needs --grid and --block")
        with np.load(args.inputs) as data:
            values = {k: data[k] for k in data.files}
        values = {k: (v.item() if v.ndim == 0 else v) for k, v in values.items()}
        launch = Launch(kern.ir, values, args.grid, args.block)
    elif hasattr(module, "make"):
        launch = module.make(*args.size)
        if launch.kernel != kern.ir:
            raise SarekError(f"{args.kernel}: the module's make() launches another kernel; "
                             "pass --inputs, --grid and --block")
    else:
        raise SarekError(f"{args.kernel}: give --inputs FILE.npz with --grid and --block "
                         "(the module has no make(m, n, k) to build a launch)")
    out = launch.simulate()
    print(f"{kern.name}: grid {launch.grid} block {launch.block}")
    expected = module.reference(launch) if hasattr(module, "reference") and not args.inputs else {}
    for name, arr in out.items():
        line = f"  {name}: {arr.size} x {arr.dtype}"
        if name in expected:
            line += f", vs reference: {demo.compare(arr, expected[name])[1]}"
        print(line)
    if args.out:
        np.savez(args.out, **out)
        print(f"wrote {args.out}")
    return 0


def _cmd_ir(args: argparse.Namespace) -> int:
    _, kern = load_kernel(args.kernel)
    print(kern.ir.model_dump_json(indent=2))
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    print(json.dumps(ir.schema(), indent=2))
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sarek", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="simulate the bundled GEMM examples and check them")
    d.add_argument("--size", type=_triple, default=(70, 45, 33), help="M,N,K (default 70,45,33)")
    d.add_argument("--examples", help="folder of gemm_*.py examples (default: the bundled ones)")
    d.set_defaults(run=_cmd_demo)
    s = sub.add_parser("simulate", help="simulate FILE.py:KERNEL")
    s.add_argument("kernel", help="FILE.py:KERNEL")
    s.add_argument("--size", type=_triple, default=(64, 64, 64),
                   help="M,N,K for the module's make() (default 64,64,64)")
    s.add_argument("--inputs", help=".npz with every parameter by name (instead of make())")
    s.add_argument("--grid", type=_triple)
    s.add_argument("--block", type=_triple)
    s.add_argument("--out", help="write the arrays after the launch to this .npz")
    s.set_defaults(run=_cmd_simulate)
    i = sub.add_parser("ir", help="print FILE.py:KERNEL's IR as JSON")
    i.add_argument("kernel")
    i.set_defaults(run=_cmd_ir)
    sc = sub.add_parser("ir-schema", help="print the JSON schema of the kernel IR")
    sc.set_defaults(run=_cmd_schema)
    from sarek import analyze  # imported here: it pulls in the recognizer and the gate

    analyze.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.run(args))
    except SarekError as e:
        print(f"sarek: error: {e.reason}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
