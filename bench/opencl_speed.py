"""How long a rewritten 128^3 GEMM takes on PoCL, printed as portable OpenCL C: the build, the
first launch (PoCL compiles the work-group function for the launch's local size there) and a
warm launch, each kernel checked bit for bit against the simulator running the same lowered
kernel. PoCL's and pyopencl's caches are off, so every build is cold, as in a fresh CI run.

By default the runner builds for CPU devices with ``-cl-opt-disable`` (``backends.opencl.run``);
``--optimized`` adds rows built with LLVM's optimizer on, which is what made the portable path
take 5 to 300 s per kernel (a few kernels only: they are that slow).

Usage: ``python -m bench.opencl_speed [--size N] [--optimized] [--out PATH]``; writes
``bench/results/opencl_speed.json`` and prints a table. Exits 1 when a kernel differs from the
simulator.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("POCL_KERNEL_CACHE", "0")  # cold builds: no PoCL kernel cache,
os.environ.setdefault("PYOPENCL_NO_CACHE", "1")  # and no pyopencl binary cache

import numpy as np

from backends.opencl.run import OPTIMIZE_VARIABLE, build_options, find_device
from backends.pipeline import Compiled, compile_launch
from backends.registry import target
from bench.harness import RESULTS, ROOT, relative, show, table, wall, write
from sarek import ir
from sarek.demo_rows import compare
from sarek.dsl import numpy_dtype
from sarek.loader import load_module
from sarek.matrix_scheme import Lowering
from sim import simulate

KERNELS = (("gemm_f16", Lowering.F16_OPERANDS), ("gemm_f32", Lowering.BF16X3_OPERANDS),
           ("gemm_f32", Lowering.BF16_OPERANDS), ("gemm_f32", Lowering.F16_OPERANDS),
           ("gemm_i32", Lowering.INT32_BYTE_PLANES))
CONFIGS = ((32, 16), (32, 8), (64, 16), (64, 8))
OPTIMIZED = (("gemm_f16", Lowering.F16_OPERANDS, 32, 16), ("gemm_f16", Lowering.F16_OPERANDS,
                                                             32, 8))
WARM = 5


def measure(compiled: Compiled, optimized: bool) -> dict[str, Any]:
    """Cold build, first launch and the median warm launch of ``compiled`` on the first OpenCL
    device, and whether its arrays equal the simulator's running its lowered kernel."""
    import pyopencl as cl

    device = find_device("")
    launch, kernel, source = compiled.launch, compiled.launch.kernel, compiled.text
    if optimized:
        os.environ[OPTIMIZE_VARIABLE] = "1"
    try:
        options = build_options(device)
    finally:
        os.environ.pop(OPTIMIZE_VARIABLE, None)
    ctx = cl.Context([device])
    queue = cl.CommandQueue(ctx)
    start = time.perf_counter()
    program = cl.Program(ctx, source).build(options=options)
    built = time.perf_counter()
    args: list[Any] = []
    buffers: dict[str, tuple[Any, np.ndarray]] = {}
    for p in kernel.params:
        value = launch.args[p.name]
        if isinstance(p, ir.ArrayParam):
            host = np.ascontiguousarray(np.asarray(value, numpy_dtype(p.elem)).ravel())
            buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                            hostbuf=host)
            buffers[p.name] = (buf, host)
            args.append(buf)
        else:
            args.append(numpy_dtype(p.elem).type(value))
    run = getattr(program, kernel.name)
    size = tuple(g * b for g, b in zip(launch.grid, launch.block, strict=True))
    first_start = time.perf_counter()
    run(queue, size, launch.block, *args)
    queue.finish()
    first = time.perf_counter() - first_start
    got = {}
    for name, (buf, host) in buffers.items():
        out = np.empty_like(host)
        cl.enqueue_copy(queue, out, buf)
        got[name] = out
    def launched() -> None:
        run(queue, size, launch.block, *args)
        queue.finish()

    warm = wall(launched, WARM)
    want = simulate(compiled.lowered, dict(launch.args), launch.grid, launch.block)
    same = all(compare(got[k], want[k])[0] for k in want)
    return {"lines": len(source.splitlines()), "build_s": built - start, "first_launch_s": first,
            "cold_total_s": built - start + first, "warm_launch_s": warm.median_s,
            "options": options, "bit_identical": same}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--optimized", action="store_true",
                        help="also time a few kernels with LLVM's optimizer on (minutes)")
    parser.add_argument("--out", type=Path, default=RESULTS / "opencl_speed.json")
    args = parser.parse_args()
    device = find_device("")
    n = args.size
    jobs = [(ex, low, sg, frag, False) for ex, low in KERNELS for sg, frag in CONFIGS]
    if args.optimized:
        jobs += [(ex, low, sg, frag, True) for ex, low, sg, frag in OPTIMIZED]
    rows = []
    title = f"{device.platform.name.strip()} / {device.name.strip()}, {n}^3, cold builds"
    opencl = target("opencl")
    for ex, low, sg, frag, optimized in jobs:
        original = load_module(ROOT / "examples" / f"{ex}.py").make(n, n, n)
        compiled = compile_launch(opencl, original, lowering=low, subgroup=sg, frag=frag)
        with np.errstate(all="ignore"):
            m = measure(compiled, optimized)
        rows.append({"example": ex, "lowering": low.value, "subgroup": sg, "frag": frag,
                     "optimized": optimized, "size": n, **m})
        print(f"{ex} {low.value} subgroup {sg} frag {frag}: {m['cold_total_s']:.2f} s",
              file=sys.stderr, flush=True)
    plain = [r["cold_total_s"] for r in rows if not r["optimized"]]
    summary = {"kernels": len(plain), "median_cold_total_s": statistics.median(plain),
               "max_cold_total_s": max(plain),
               "all_under_2_s": all(t < 2.0 for t in plain),
               "all_bit_identical": all(r["bit_identical"] for r in rows)}
    result = {"device": device.name.strip(), "platform": device.platform.name.strip(),
              "platform_version": device.platform.version.strip(), "size": n,
              "summary": summary, "rows": rows}
    path = write("opencl_speed", result, args.out)
    show(table(title, ("kernel", "sg", "frag", "opt", "lines", "build", "1st run", "total",
                       "warm", "result"),
               [(f"{r['example']} {r['lowering']}", r["subgroup"], r["frag"],
                 "on" if r["optimized"] else "off", r["lines"], f"{r['build_s']:.2f} s",
                 f"{r['first_launch_s']:.2f} s", f"{r['cold_total_s']:.2f} s",
                 f"{r['warm_launch_s'] * 1e3:.1f} ms",
                 "bit-identical" if r["bit_identical"] else "DIFFERS") for r in rows]),
         f"{summary['kernels']} kernels at {n}^3 without the optimizer: cold build + first "
         f"launch median {summary['median_cold_total_s']:.2f} s, max "
         f"{summary['max_cold_total_s']:.2f} s; all bit-identical: "
         f"{summary['all_bit_identical']}; wrote {relative(path)}")
    return 0 if summary["all_bit_identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
