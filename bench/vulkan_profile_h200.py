"""Where the time of a rewritten GEMM goes through Vulkan: variants of the printed module that
leave one stage out, timed with GPU timestamps beside the module as printed.

At 4096^3 (``--n``), under one lowering (``--lowering``, on its bundled example), for each
schedule (``--schedules``), the kernel the ``vulkan`` target builds is printed as SPIR-V and
timed (``backends.spirv.run.time_kernel(text=...)``, median of 10 dispatches) as printed; on
the schedules named by ``--strip`` it is timed again without one stage at a time:

* ``no global loads``: staged words (elements) made of zeros (undefined) instead of loaded;
* ``no staging``: nothing stored into the staged tiles (so no global loads either);
* ``no fragment loads``: A and B fragments made of a constant instead of loaded;
* ``no multiply-adds``: the accumulators passed through unchanged (fragment loads then die);
* ``no barriers``: every ``OpControlBarrier`` removed.

The stripped variants compute garbage; only their times mean something. With ``--variants``
the module is also timed after ``spirv-opt`` (``-O``, and only the passes that promote Function
variables to SSA values). The same schedules through CUDA are timed in the same run, and each
Vulkan output is compared bit for bit with CUDA's. Writes bench/results/vulkan_profile_h200.json
(``--out``) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from backends_speed_h200 import EXAMPLES  # noqa: E402
from gpu_speed_h200 import REPEATS, kernel_output, kernel_seconds  # noqa: E402

from backends.cuda.run import device_arch  # noqa: E402
from backends.pipeline import compile_launch  # noqa: E402
from backends.registry import target  # noqa: E402
from backends.spirv.device import device, device_name, runnable  # noqa: E402
from backends.spirv.run import time_kernel  # noqa: E402
from backends.spirv.tools import TARGET_ENV, tool  # noqa: E402
from sarek import emit  # noqa: E402
from sarek.errors import SarekError  # noqa: E402
from sarek.loader import load_module  # noqa: E402
from sarek.matrix_scheme import Lowering  # noqa: E402
from sarek.schedule import Schedule  # noqa: E402

SSA_PASSES = ("--eliminate-local-single-block", "--eliminate-local-single-store",
              "--ssa-rewrite", "--eliminate-dead-code-aggressive")


def optimized(text: str, passes: tuple[str, ...]) -> str:
    """``text`` through ``spirv-opt`` with ``passes``, disassembled again."""
    with tempfile.TemporaryDirectory() as tmp:
        src, mid, out = (Path(tmp, x) for x in ("m.spvasm", "m.spv", "o.spv"))
        src.write_text(text)
        subprocess.run([str(tool("spirv-as")), "--target-env", TARGET_ENV, str(src), "-o",
                        str(mid)], check=True)
        subprocess.run([str(tool("spirv-opt")), f"--target-env={TARGET_ENV}", *passes,
                        str(mid), "-o", str(out)], check=True)
        text = subprocess.run([str(tool("spirv-dis")), "--raw-id", "--no-indent", str(out)],
                              check=True, capture_output=True, text=True).stdout
    entry = re.search(r"^OpEntryPoint GLCompute (%\w+) ", text, re.M)
    assert entry is not None
    return re.sub(rf"{entry[1]}\b", "%main", text)  # the name ``runnable`` looks for


def _chains(text: str, pointer: str) -> set[str]:
    return set(re.findall(rf"^\s*(%\w+) = OpAccessChain {pointer} ", text, re.M))


def no_global_loads(text: str) -> str:
    ptrs = _chains(text, r"%p_st_(?:f16|f32|i8|u16|v4u32) %\w+")
    zero = {"%v4u32": "OpCompositeConstruct %v4u32 %c_u32_0 %c_u32_0 %c_u32_0 %c_u32_0"}
    return re.sub(r"^(\s*%\w+) = OpLoad (%\w+) (%\w+)$",
                  lambda m: f"{m[1]} = {zero.get(m[2], 'OpUndef ' + m[2])}" if m[3] in ptrs
                  else m[0], text, flags=re.M)


def no_staging(text: str) -> str:
    ptrs = _chains(text, r"%p_wo_(?:f16|v4u32) %\w+_sk_(?:a|b|ra|rb)")
    return re.sub(r"^\s*OpStore (%\w+) %\w+ NonPrivatePointer\n",
                  lambda m: "" if m[1] in ptrs else m[0], text, flags=re.M)


def no_fragment_loads(text: str) -> str:
    return re.sub(r"^(\s*%\w+) = OpCooperativeMatrixLoadKHR (%cm_[ab]_f16_\w+) .*$",
                  r"\1 = OpCompositeConstruct \2 %c_f16_0x0_0p_0", text, flags=re.M)


def no_multiply_adds(text: str) -> str:
    return re.sub(r"^(\s*%\w+) = OpCooperativeMatrixMulAddKHR (%\w+) %\w+ %\w+ (%\w+)$",
                  r"\1 = OpCopyObject \2 \3", text, flags=re.M)


def no_barriers(text: str) -> str:
    return re.sub(r"^\s*OpControlBarrier .*\n", "", text, flags=re.M)


STRIPS: dict[str, Callable[[str], str]] = {
    "no global loads": no_global_loads,
    "no staging": no_staging,
    "no fragment loads": no_fragment_loads, "no multiply-adds": no_multiply_adds,
    "no barriers": no_barriers}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--lowering", default="F16_operands", choices=[x.value for x in Lowering])
    parser.add_argument("--variants", action="store_true",
                        help="also time the module after spirv-opt (-O, and the SSA passes)")
    parser.add_argument("--schedules", nargs="+",
                        default=["t64k16", "t128k16", "t64k32s2", "t128k32s2"])
    parser.add_argument("--strip", nargs="*", default=["t64k16", "t128k32s2"])
    parser.add_argument("--out", default="vulkan_profile_h200.json")
    opts = parser.parse_args(argv)
    n, flops = opts.n, 2.0 * opts.n ** 3
    arch = device_arch()
    lowering = Lowering(opts.lowering)
    original = load_module(ROOT / "examples" / f"{EXAMPLES[lowering]}.py").make(n, n, n)
    rows: list[dict[str, Any]] = []

    def row(**r: Any) -> None:
        if "median_s" in r:
            r["tflops"] = flops / r["median_s"] / 1e12
        rows.append(r)
        print(f"{lowering.value:17} {r['schedule']:13} {r['variant']:34} "
              + (f"{r['median_s'] * 1e3:9.3f} ms {r['tflops']:8.2f} TFLOP/s"
                 + (f"  same bits as printed: {r['same_bits']}" if "same_bits" in r else "")
                 + (f"  as CUDA's: {r['bit_identical_to_cuda']}"
                    if "bit_identical_to_cuda" in r else "")
                 if "median_s" in r else f"error: {r.get('error')}"), flush=True)

    for name in opts.schedules:
        schedule = Schedule.parse(name)
        compiled = compile_launch(target("vulkan"), original, lowering=lowering,
                                  schedule=schedule)
        launch = compiled.launch
        c = compiled.gemm.c.array if compiled.gemm else "c"
        want: np.ndarray | None = None
        try:
            cuda = compile_launch(target("cuda"), original, lowering=lowering,
                                  schedule=schedule)
            row(schedule=name, variant="CUDA", median_s=kernel_seconds(cuda, arch))
            want = kernel_output(cuda, arch, c)
        except Exception as e:  # the Vulkan rows still mean something
            row(schedule=name, variant="CUDA", error=str(e)[:300])
        printed = runnable(emit(launch.kernel, "spirv"), device())
        variants = {"Vulkan as printed": printed}
        if opts.variants:
            variants["Vulkan, spirv-opt -O"] = optimized(printed, ("-O",))
            variants["Vulkan, spirv-opt SSA passes"] = optimized(printed, SSA_PASSES)
        if name in opts.strip:
            for label, strip in STRIPS.items():
                variants[f"Vulkan, {label}"] = strip(printed)
        reference: np.ndarray | None = None
        for label, text in variants.items():
            try:
                out, times = time_kernel(launch.kernel, dict(launch.args), launch.grid,
                                         launch.block, REPEATS, text=text)
            except (SarekError, subprocess.CalledProcessError) as e:
                row(schedule=name, variant=label, error=str(e)[:300])
                continue
            bits = out[c].view(f"u{out[c].dtype.itemsize}")
            extra: dict[str, Any] = {}
            if reference is None:
                reference = bits
            elif "no " not in label:
                extra["same_bits"] = bool(np.array_equal(bits, reference))
            if "no " not in label and want is not None:
                extra["bit_identical_to_cuda"] = bool(np.array_equal(bits, want))
            row(schedule=name, variant=label, median_s=statistics.median(times), **extra)
    (ROOT / "bench" / "results" / opts.out).write_text(json.dumps(
        {"device": device_name(), "n": n, "lowering": lowering.value, "repeats": REPEATS,
         "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
