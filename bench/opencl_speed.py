"""The portable OpenCL target's rewritten GEMMs beside the naive kernels they replace, on one
OpenCL device: each original (``gemm_f16``, ``gemm_f32``, ``gemm_i32``, ``gemm_i8`` as
written) and each rewrite of it (every lowering the example takes, at each subgroup and
fragment) built cold,
then launched in rounds, every kernel once a round, so that the medians are measured side by
side under the same load. Launches are timed by the device's profiling events. Each kernel
is also checked bit for bit: on the device at ``--check-size`` against the simulator running
the same kernel (the lowered kernel for a rewrite), and at the timed size against the naive
kernel where the lowering is exact for the example (F16 of f16 operands, the byte planes,
Int8).

The device is the portable runner's: ``--platform`` (a part of a platform's name), else
``$SAREK_OPENCL_PLATFORM``, else the first platform with a device. Programs are built with
the runner's options (``backends.opencl.run.build_options``: on a CPU device, PoCL, without
LLVM's optimizer); ``--optimized`` adds the F16 kernels (or those of the examples ``--only``
names) and their naive kernels built with it.
PoCL's and pyopencl's caches are off, so every build is cold, as in a fresh CI run.

Usage: ``python -m bench.opencl_speed [--size N] [--check-size N] [--platform NAME]
[--configs all|32x16,32x16@t128k16,...] [--f16-configs ...] [--only gemm_f16,...]
[--optimized] [--rounds R] [--out PATH]``; writes ``bench/results/opencl_speed.json`` and
prints a table. Exits 1 when a kernel differs from the simulator (or from the naive kernel
where the lowering is exact), or fails to build or launch. On the H200:
``SAREK_OPENCL_PLATFORM=NVIDIA python -m bench.opencl_speed --size 4096 --configs
32x16,32x8,64x16 --f16-configs 64x8,32x16@t128k16,64x16@t128k16 --out
opencl_speed_nvidia_h200.json``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("POCL_KERNEL_CACHE", "0")  # cold builds: no PoCL kernel cache,
os.environ.setdefault("PYOPENCL_NO_CACHE", "1")  # and no pyopencl binary cache

import numpy as np

from backends.opencl.run import OPTIMIZE_VARIABLE, build_options, chosen_platform, find_device
from backends.pipeline import Compiled, compile_launch
from backends.registry import target
from bench.harness import RESULTS, ROOT, relative, show, table, write
from sarek import ir
from sarek.demo_rows import compare_all
from sarek.dsl import numpy_dtype
from sarek.launch import Launch
from sarek.loader import load_module
from sarek.matrix_scheme import Lowering
from sarek.schedule import Schedule
from sim import simulate

EXAMPLES: dict[str, tuple[Lowering, ...]] = {
    "gemm_f16": (Lowering.F16_OPERANDS,),
    "gemm_f32": (Lowering.BF16X3_OPERANDS, Lowering.BF16_OPERANDS, Lowering.F16_OPERANDS),
    "gemm_i32": (Lowering.INT32_BYTE_PLANES,),
    "gemm_i8": (Lowering.INT8_OPERANDS,),
}
EXACT = {("gemm_f16", Lowering.F16_OPERANDS), ("gemm_i32", Lowering.INT32_BYTE_PLANES),
         ("gemm_i8", Lowering.INT8_OPERANDS)}
"""Rewrites whose every output equals the original's: the same products, added in k order."""
OPTIMIZED = "gemm_f16"


@dataclass(frozen=True)
class Config:
    """A rewrite's subgroup and fragment, and its schedule (None: the target's policy)."""

    subgroup: int
    frag: int
    schedule: Schedule | None = None

    @classmethod
    def parse(cls, text: str) -> Config:
        """``32x16``, or ``32x16@t128k16`` with a schedule."""
        pair, _, schedule = text.partition("@")
        sg, fr = pair.split("x")
        return cls(int(sg), int(fr), Schedule.parse(schedule) if schedule else None)


CONFIGS = (Config(32, 16), Config(32, 8), Config(64, 16), Config(64, 8))


@dataclass
class Kernel:
    """One program on the device: the naive original (``lowering`` None) or a rewrite."""

    example: str
    lowering: Lowering | None
    config: Config | None
    optimized: bool
    compiled: Compiled
    program: Any = None
    build_s: float = 0.0
    first_s: float = 0.0
    launches: list[float] = field(default_factory=list)
    result: dict[str, np.ndarray] = field(default_factory=dict)
    error: str | None = None

    @property
    def name(self) -> str:
        return f"{self.example} {self.lowering.value if self.lowering else 'naive'}"

    @property
    def lines(self) -> int:
        return len(self.compiled.text.splitlines())


def options(device: Any, optimized: bool) -> list[str]:
    """The runner's build options, or with the optimizer on."""
    if optimized:
        os.environ[OPTIMIZE_VARIABLE] = "1"
    try:
        return build_options(device)
    finally:
        if optimized:
            os.environ.pop(OPTIMIZE_VARIABLE, None)


def prepare(k: Kernel, ctx: Any, queue: Any, device: Any) -> Callable[[], float]:
    """Builds ``k`` cold and launches it once (``k.result``); a function that launches it
    again and returns the device's seconds."""
    import pyopencl as cl

    start = time.perf_counter()
    k.program = cl.Program(ctx, k.compiled.text).build(options=options(device, k.optimized))
    k.build_s = time.perf_counter() - start
    start = time.perf_counter()
    run, k.result = launcher(k, k.compiled.launch, ctx, queue)
    k.first_s = time.perf_counter() - start
    return run


def launcher(k: Kernel, launch: Launch, ctx: Any, queue: Any
             ) -> tuple[Callable[[], float], dict[str, np.ndarray]]:
    """``launch`` (of ``k``'s kernel text) launched once with ``k``'s program: every array
    afterwards, and a function that launches it again and returns the device's seconds."""
    import pyopencl as cl

    args: list[Any] = []
    buffers: dict[str, tuple[Any, np.ndarray]] = {}
    for p in launch.kernel.params:
        value = launch.args[p.name]
        if isinstance(p, ir.ArrayParam):
            host = np.ascontiguousarray(np.asarray(value, numpy_dtype(p.elem)).ravel())
            buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                            hostbuf=host)
            buffers[p.name] = (buf, host)
            args.append(buf)
        else:
            args.append(numpy_dtype(p.elem).type(value))
    fn = cl.Kernel(k.program, launch.kernel.name)
    size = tuple(g * b for g, b in zip(launch.grid, launch.block, strict=True))

    def run() -> float:
        event = fn(queue, size, launch.block, *args)
        event.wait()
        return float(event.profile.end - event.profile.start) * 1e-9

    run()
    result = {}
    for name, (buf, host) in buffers.items():
        out = np.empty_like(host)
        cl.enqueue_copy(queue, out, buf)
        result[name] = out
    return run, result


def check(k: Kernel, small: Launch, ctx: Any, queue: Any) -> str | None:
    """None when ``k``'s program, launched at the check size, gives the simulator's bits
    (running the lowered kernel for a rewrite), else how they differ."""
    compiled = compile_for(small, k.lowering, k.config)
    if compiled.text != k.compiled.text:  # the text takes every size as an argument
        raise AssertionError(f"{k.name}: the kernel printed at the check size differs")
    want = simulate(compiled.lowered, dict(compiled.launch.args), compiled.launch.grid,
                    compiled.launch.block)
    return compare_all(launcher(k, compiled.launch, ctx, queue)[1], want)


def compile_for(launch: Launch, lowering: Lowering | None, config: Config | None) -> Compiled:
    opencl = target("opencl")
    if lowering is None or config is None:
        return compile_launch(opencl, launch, rewrite=False)
    return compile_launch(opencl, launch, lowering=lowering, subgroup=config.subgroup,
                          frag=config.frag, schedule=config.schedule)


def outputs(k: Kernel) -> dict[str, np.ndarray]:
    """The original's arrays (by its parameter names) after ``k``'s launch."""
    return {p.name: k.result[p.name] for p in k.compiled.original.kernel.params
            if isinstance(p, ir.ArrayParam)}


def row(k: Kernel, base: Kernel | None, n: int) -> dict[str, Any]:
    """``k``'s record: its timing beside the naive kernel's (unchecked yet)."""
    rw = k.compiled.rewritten
    median = statistics.median(k.launches) if k.launches else None
    return {
        "example": k.example, "lowering": k.lowering.value if k.lowering else None,
        "subgroup": rw and rw.subgroup, "frag": rw and rw.frag,
        "schedule": rw and rw.schedule.name,
        "policy": k.config is None or k.config.schedule is None, "optimized": k.optimized,
        "size": n, "lines": k.lines, "build_s": k.build_s, "first_launch_s": k.first_s,
        "launch_s": k.launches, "median_s": median,
        "tflops": median and 2 * n**3 / median / 1e12,
        "speedup_vs_naive": median and base and base.launches
        and statistics.median(base.launches) / median,
        "error": k.error, "bit_identical": None, "difference": None, "equals_naive": None}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    good = all(r["error"] is None and r["bit_identical"] and r["equals_naive"] is not False
               for r in rows)
    f16 = [r for r in rows if r["example"] == "gemm_f16" and r["lowering"]
           and not r["optimized"] and r["speedup_vs_naive"]]
    built = [r["build_s"] for r in rows if r["error"] is None]
    return {"kernels": len(rows), "all_bit_identical": good,
            "f16_default_speedup": next((r["speedup_vs_naive"] for r in f16 if r["policy"]
                                         and (r["subgroup"], r["frag"]) == (32, 16)), None),
            "f16_best_speedup": max((r["speedup_vs_naive"] for r in f16), default=None),
            "median_build_s": statistics.median(built) if built else None,
            "max_build_s": max(built, default=None)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=256, help="m = n = k timed (256)")
    parser.add_argument("--check-size", type=int, default=96,
                        help="m = n = k checked against the simulator (96)")
    parser.add_argument("--platform", default=None, help="a part of a platform's name")
    parser.add_argument("--configs", default="all", help="subgroup x fragment pairs: all, or "
                        "a list such as 32x16,32x8,32x16@t128k16 (a schedule after @)")
    parser.add_argument("--f16-configs", default="",
                        help=f"more configurations for {OPTIMIZED} alone, as --configs")
    parser.add_argument("--optimized", action="store_true",
                        help=f"also {OPTIMIZED} (or the examples --only names) and their "
                        "rewrites built with LLVM's optimizer")
    parser.add_argument("--rounds", type=int, default=5, help="timed launches per kernel")
    parser.add_argument("--only", default="", help="examples to run, such as gemm_f16,gemm_f32")
    parser.add_argument("--out", type=Path, default=RESULTS / "opencl_speed.json")
    args = parser.parse_args()
    import pyopencl as cl

    device = find_device(chosen_platform(args.platform))
    ctx = cl.Context([device])
    queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    n = args.size
    configs = CONFIGS if args.configs == "all" else tuple(
        Config.parse(c) for c in args.configs.split(","))
    more = tuple(Config.parse(c) for c in args.f16_configs.split(",") if c)
    kernels: list[tuple[Kernel, Callable[[], float] | None]] = []
    small: dict[str, Launch] = {}
    for optimized in (False, True) if args.optimized else (False,):
        for example, lowerings in EXAMPLES.items():
            if (args.only and example not in args.only.split(",")) or (
                    optimized and not args.only and example != OPTIMIZED):
                continue
            module = load_module(ROOT / "examples" / f"{example}.py")
            launch, small[example] = module.make(n, n, n), module.make(*(args.check_size,) * 3)
            extra = more if example == OPTIMIZED else ()
            jobs = [(None, None)] + [(low, c) for low in lowerings for c in configs + extra]
            for low, config in jobs:
                k = Kernel(example, low, config, optimized, compile_for(launch, low, config))
                run: Callable[[], float] | None = None
                try:
                    with np.errstate(all="ignore"):
                        run = prepare(k, ctx, queue, device)
                except cl.Error as e:  # recorded, and the run goes on with the others
                    k.error = f"{type(e).__name__}: {e}"
                kernels.append((k, run))
                print(f"{k.name} {config} optimizer {optimized}: built in {k.build_s:.2f} s, "
                      f"first launch {k.first_s:.3f} s {k.error or ''}", file=sys.stderr,
                      flush=True)
    for _ in range(args.rounds):  # side by side: every kernel once a round
        for k, run in kernels:
            if run is not None:
                k.launches.append(run())
    naive = {(k.example, k.optimized): k for k, _ in kernels if k.lowering is None}
    rows = [row(k, naive.get((k.example, k.optimized)), n) for k, _ in kernels]
    result = {"device": device.name.strip(), "platform": device.platform.name.strip(),
              "platform_version": device.platform.version.strip(), "size": n,
              "check_size": args.check_size, "rounds": args.rounds,
              "summary": summarize(rows), "rows": rows}
    write("opencl_speed", result, args.out)  # the timings, should a check not come back
    for (k, run), r in zip(kernels, rows, strict=True):
        if run is None:
            continue
        try:
            with np.errstate(all="ignore"):
                r["difference"] = check(k, small[k.example], ctx, queue)
        except cl.Error as e:
            r["difference"] = f"the check did not run: {type(e).__name__}: {e}"
        r["bit_identical"] = r["difference"] is None
        base = naive.get((k.example, k.optimized))
        if base is not None and (k.lowering is None or (k.example, k.lowering) in EXACT):
            r["equals_naive"] = compare_all(outputs(k), outputs(base)) is None
    summary = result["summary"] = summarize(rows)
    path = write("opencl_speed", result, args.out)
    good = bool(summary["all_bit_identical"])
    default = "" if summary["f16_default_speedup"] is None else (
        f" (subgroup 32, fragment 16, the target's schedule: "
        f"{summary['f16_default_speedup']:.2f}x)")
    title = (f"{device.platform.name.strip()} / {device.name.strip()}, {n}^3, medians of "
             f"{args.rounds} side-by-side launches")
    show(table(title, ("example", "lowering", "config", "optimizer", "build", "1st run",
                       "median", "TFLOP/s", "vs naive", "bits"), [
                (r["example"], r["lowering"] or "naive",
                 f"{r['subgroup']}x{r['frag']} {r['schedule']}" if r["lowering"] else "",
                 "on" if r["optimized"] else "off", f"{r['build_s']:.2f} s",
                 f"{r['first_launch_s']:.2f} s", _ms(r["median_s"]), _figure(r["tflops"]),
                 _figure(r["speedup_vs_naive"], "x"), _bits(r)) for r in rows], left=4),
         f"F16 of gemm_f16: {_figure(summary['f16_best_speedup'], 'x')} the naive kernel in its "
         f"best configuration{default}; builds median {_figure(summary['median_build_s'])} s, "
         f"max {_figure(summary['max_build_s'])} s; all bit-identical: {good} (bits: equal to "
         f"the simulator's at {args.check_size}^3, and to the naive kernel's at {n}^3 where "
         f"the lowering is exact); wrote {relative(path)}")
    return 0 if good else 1


def _ms(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds * 1e3:.2f} ms"


def _figure(x: float | None, unit: str = "") -> str:
    return "" if x is None else f"{x:.3g}{unit}"


def _bits(r: dict[str, Any]) -> str:
    if r["error"]:
        return f"ERROR: {r['error'][:60]}"
    if not r["bit_identical"]:
        return f"DIFFERS: {r['difference']}"
    if r["equals_naive"] is False:
        return "DIFFERS from naive"
    return "sim, naive" if r["equals_naive"] else "sim"


if __name__ == "__main__":
    sys.exit(main())
