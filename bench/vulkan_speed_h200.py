"""The Vulkan row of the GPU speed benchmark: the rewritten F16 GEMM at 4096^3 through Vulkan
against the same kernel through CUDA and cuBLAS f16, in one run.

One rewritten kernel (``gemm_f16`` under ``F16_operands``, subgroup 32, fragment 16, staged as
the CUDA target's policy stages f16, which is also the SPIR-V target's) is printed as SPIR-V and
dispatched through Vulkan (``backends.spirv.run.time_kernel``: GPU timestamps around each
dispatch) and printed as CUDA and launched through the driver API (CUDA events), each the
median of 10 launches after a warm-up over the same device buffers; cuBLAS f16 through PyTorch
is timed the same way. Both schedules are timed: the seed's (64x64 tiles) and the one the CUDA
target takes at this size. The two devices' outputs are compared bit for bit (the same IR under
the same tensor-core arithmetic). Two variants of the printed module are timed beside it: its
loops without the ``Unroll`` hint the printer gives short constant loops, and, as a diagnostic
only (not a valid module), its Workgroup accesses without ``NonPrivatePointer``. Writes
bench/results/vulkan_speed_h200.json and prints TFLOP/s (2mnk) and the ratio the project sets a
target for (Vulkan >= 0.8x CUDA).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

from backends.cuda.run import device_arch
from backends.pipeline import compile_launch
from backends.registry import target
from backends.spirv.device import device_name
from backends.spirv.run import time_kernel
from bench.gpu_speed_h200 import REPEATS, kernel_output, kernel_seconds, torch_seconds
from sarek import emit
from sarek.errors import SarekError
from sarek.loader import load_module
from sarek.matrix_scheme import Lowering
from sarek.schedule import SEED

ROOT = Path(__file__).resolve().parent.parent

N = 4096


def cublas_f16(n: int) -> float:
    import torch  # type: ignore[import-not-found]

    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    return torch_seconds(lambda: a @ b)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-cublas", action="store_true", help="leave cuBLAS out")
    parser.add_argument("--out", default="vulkan_speed_h200.json",
                        help="the report's name in bench/results")
    opts = parser.parse_args(argv)
    arch = device_arch()
    flops = 2.0 * N**3
    original = load_module(ROOT / "examples" / "gemm_f16.py").make(N, N, N)
    cuda = target("cuda")
    rows: list[dict[str, Any]] = []
    if not opts.no_cublas:
        try:
            rows.append({"kernel": "cuBLAS f16", "median_s": cublas_f16(N)})
        except Exception as e:  # a missing baseline is reported, not fatal
            rows.append({"kernel": "cuBLAS f16", "error": str(e)[:200]})
    best = compile_launch(cuda, original, lowering=Lowering.F16_OPERANDS)
    assert best.rewritten is not None and best.gemm is not None
    c = best.gemm.c.array
    for schedule in dict.fromkeys((best.rewritten.schedule, SEED)):
        compiled = compile_launch(cuda, original, lowering=Lowering.F16_OPERANDS, schedule=schedule)
        launch = compiled.launch
        label = f"rewritten F16_operands {schedule.name}"
        cuda_s = kernel_seconds(compiled, arch)
        rows.append({"kernel": f"{label} through CUDA", "median_s": cuda_s})
        # the very kernel CUDA runs (CUDA's staging and schedule), printed for Vulkan
        printed = emit(launch.kernel, "spirv")
        variants = {"": printed,
                    ", loops without the Unroll hint": printed.replace(" Unroll\n", " None\n"),
                    # a diagnostic, not a valid module: Workgroup accesses the memory model
                    # does not order across the barriers
                    ", diagnostic: Workgroup accesses private": printed.replace(
                        " NonPrivatePointer", "")}
        want = kernel_output(compiled, arch, c)
        for suffix, text in variants.items():
            name = f"{label} through Vulkan{suffix}"
            try:
                out, times = time_kernel(launch.kernel, dict(launch.args), launch.grid,
                                         launch.block, REPEATS, text=text)
            except SarekError as e:
                rows.append({"kernel": name, "error": e.reason[:400]})
                continue
            vulkan_s = statistics.median(times)
            got = out[c].view(f"u{out[c].dtype.itemsize}")
            rows.append({"kernel": name, "median_s": vulkan_s, "vulkan_over_cuda": cuda_s
                         / vulkan_s, "bit_identical_to_cuda": bool(np.array_equal(got, want))})
    for r in rows:
        if "median_s" in r:
            r["tflops"] = flops / r["median_s"] / 1e12
            print(f"{r['kernel']:52} {r['median_s'] * 1e3:9.3f} ms {r['tflops']:8.2f} TFLOP/s"
                  + (f"  {r['vulkan_over_cuda']:.3f}x CUDA, bit-identical to CUDA: "
                     f"{r['bit_identical_to_cuda']}" if "vulkan_over_cuda" in r else ""))
        else:
            print(f"{r['kernel']:52} error: {r['error']}")
    result = {"device": device_name(), "arch": arch, "n": N, "repeats": REPEATS, "rows": rows,
              "target": "Vulkan >= 0.8x the CUDA path on the same kernel"}
    (ROOT / "bench" / "results" / opts.out).write_text(
        json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
