"""Occupancy against registers: each lowering's policy kernel timed under register caps.

The rewritten kernels fill an H200 SM's register file with two blocks of four warps (F16 at
128x128 tiles: 228 registers a lane) or one block of eight (the wide Bf16 and Bf16x3
schedules: 255). Capping the registers NVRTC may use (``--maxrregcount``) admits more blocks
per SM at the price of spills. This script times the kernel CUDA's policy picks at ``--n``
(4096 by default) for every lowering under each cap, side by side in one run (medians of 10
launches, CUDA events), checks that each capped kernel's output is bit-identical to the
uncapped one's, and reports ptxas's registers and spills.

    python -m bench.register_cap_h200 [--n 4096] [--caps 168 128] [--out FILE]

Prints a table and writes ``register_cap_h200.json`` (``--out``, by default under
``bench/results``).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

from backends.cuda.nvrtc import compile_logged
from backends.cuda.run import device_arch, device_name, launch_cubin, time_cubin
from backends.cuda.shared import dynamic_bytes
from backends.pipeline import compile_launch
from backends.registry import target
from bench.gpu_speed_h200 import REPEATS
from bench.harness import RESULTS, ROOT, write
from bench.schedule_sweep_h200 import EXAMPLE
from sarek.dsl import numpy_dtype
from sarek.launch import Launch
from sarek.loader import load_module
from sarek.matrix_scheme import Lowering


def compiled(source: str, arch: str, cap: int | None) -> tuple[bytes, str]:
    """The cubin NVRTC builds under register cap ``cap`` and ptxas's verbose log."""
    options = ("--ptxas-options=-v",) + (() if cap is None else (f"--maxrregcount={cap}",))
    return compile_logged(source, arch, options=options)


def ptxas_facts(log: str) -> dict[str, int]:
    regs = re.search(r"Used (\d+) registers", log)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    return {"registers": int(regs[1]) if regs else -1,
            "spill_store_bytes": int(spill[1]) if spill else -1,
            "spill_load_bytes": int(spill[2]) if spill else -1}


def params_of(launch: Launch) -> list[Any]:
    out: list[Any] = []
    for p in launch.kernel.params:
        dt = numpy_dtype(p.elem)
        value = launch.args[p.name]
        out.append(np.asarray(value, dt) if hasattr(value, "shape") else dt.type(value))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--caps", type=int, nargs="+", default=[168, 128])
    parser.add_argument("--out", type=Path,
                        default=RESULTS / "register_cap_h200.json")
    args = parser.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    arch = device_arch()
    rows: list[dict[str, Any]] = []
    for lowering in Lowering:
        launch = load_module(ROOT / "examples" / f"{EXAMPLE[lowering]}.py").make(
            args.n, args.n, args.n)
        cuda = compile_launch(target("cuda"), launch, lowering=lowering)
        rw, source = cuda.launch, cuda.text
        params = params_of(rw)
        shared = dynamic_bytes(rw.kernel)
        out_index = [p.name for p in rw.kernel.params].index("c")
        reference = None
        for cap in (None, *args.caps):
            cubin, log = compiled(source, arch, cap)
            result = launch_cubin(cubin, rw.kernel.name, params, rw.grid, rw.block, shared)
            bits = result[out_index]
            assert bits is not None
            reference = bits if reference is None else reference
            seconds = statistics.median(time_cubin(cubin, rw.kernel.name, params, rw.grid,
                                                   rw.block, REPEATS, shared))
            rows.append({"lowering": lowering.value, "schedule": rw.notes["schedule"],
                         "cap": cap, **ptxas_facts(log), "median_s": seconds,
                         "tflops": 2.0 * args.n ** 3 / seconds / 1e12,
                         "bit_identical_to_uncapped": bool(
                             (bits.view(np.uint8) == reference.view(np.uint8)).all())})
    table = Table(title=f"Register caps at {args.n}^3 ({device_name()})")
    for col in ("lowering", "schedule", "cap", "registers", "spills (B)", "TFLOP/s",
                "same bits"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["lowering"], r["schedule"], str(r["cap"] or "none"), str(r["registers"]),
                      f"{r['spill_store_bytes']}/{r['spill_load_bytes']}", f"{r['tflops']:.1f}",
                      str(r["bit_identical_to_uncapped"]))
    Console().print(table)
    write("register_cap_h200", {"device": device_name(), "arch": arch, "n": args.n,
                                "rows": rows}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
