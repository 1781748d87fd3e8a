"""Schedules on the H200: every candidate schedule of every lowering at one size, timed side by
side, each output checked bit for bit against the seed schedule's on the device.

Every schedule takes each output's products in the same order, so each must give the seed's
bits. Prints a table and writes bench/results/schedule_sweep_h200.json (medians of
``gpu_speed_h200.REPEATS`` launches, TFLOP/s at 2mnk; ``--cublas``: cuBLAS f16, or cuBLAS of
each type it names (``--cublas f16 bf16``), at the same size in the same run, a row each;
``--cupy-int32``: CuPy's int32 matmul likewise, the byte planes' baseline; ``--cublas f32``
is SGEMM with TF32 off, ``tf32`` with it on; ``--converting``: each pipelined schedule of a
lowering whose terms the policy splits by a pre-pass, ``Staging.prepass_terms``, also timed
converting as it stages, labelled ``converting``).
CUDA's staging policy (``backends/cuda/lower.py``) names the fastest for large regions.

    python -m bench.schedule_sweep_h200 [--n 4096] [--lowering F16_operands ...]
                                        [--example gemm_f32] [--schedule t128k64s2g ...]
                                        [--cublas [f16] [bf16] [f32] [tf32]]
                                        [--cupy-int32] [--converting]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from backends.cuda.run import device_arch, device_name
from backends.pipeline import compile_launch
from backends.registry import target
from bench.gpu_speed_h200 import (
    cupy_int32_seconds,
    kernel_output,
    kernel_seconds,
    torch_seconds,
)
from bench.harness import RESULTS, ROOT, show, table, write
from sarek.errors import SarekError
from sarek.loader import load_module
from sarek.matrix_scheme import Lowering
from sarek.schedule import SEED, Schedule

CANDIDATES = (
    SEED, Schedule(tile=128, step=16),
    Schedule(stages=3), Schedule(step=32), Schedule(step=32, stages=2),
    Schedule(step=32, stages=3), Schedule(step=32, stages=4),
    Schedule(step=64, stages=2),
    Schedule(tile=128, step=16, stages=3), Schedule(tile=128, step=16, stages=4),
    Schedule(tile=128, step=32, stages=2), Schedule(tile=128, step=32, stages=3),
    Schedule(tile=128, step=32, stages=4), Schedule(tile=128, step=64, stages=2),
    Schedule(tile=128, step=64, stages=3),
    Schedule(tile=128, step=16, stages=3, wide=True), Schedule(tile=128, step=32, stages=3,
                                                              wide=True),
    Schedule(tile=128, step=64, stages=2, wide=True),
    Schedule(prefetch=True), Schedule(step=32, prefetch=True), Schedule(step=64),
    Schedule(step=64, prefetch=True),
)
EXAMPLE = {Lowering.F16_OPERANDS: "gemm_f16", Lowering.BF16_OPERANDS: "gemm_f32",
           Lowering.BF16X3_OPERANDS: "gemm_f32", Lowering.INT32_BYTE_PLANES: "gemm_i32"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--lowering", action="append", choices=[x.value for x in Lowering])
    parser.add_argument("--schedule", action="append",
                        help="these schedules (names such as t64k32p) instead of the candidates")
    parser.add_argument("--example", help="this example (such as gemm_f32) for every lowering")
    parser.add_argument("--cublas", nargs="*", choices=tuple(CUBLAS),
                        help="also time cuBLAS (through PyTorch) at the same size: f16 (the "
                        "default), bf16, f32 (SGEMM, TF32 off), tf32, or several")
    parser.add_argument("--converting", action="store_true",
                        help="also time each pipelined schedule converting as it stages where "
                        "the policy splits the operands' terms by a pre-pass")
    parser.add_argument("--cupy-int32", action="store_true",
                        help="also time CuPy's int32 matmul at the same size (Tops at 2mnk)")
    parser.add_argument("--out", type=Path, default=RESULTS
                        / "schedule_sweep_h200.json")
    args = parser.parse_args()
    n, arch, cuda = args.n, device_arch(), target("cuda")
    converting = replace(cuda, staging=replace(cuda.staging, prepass_terms=False))
    lowerings = [Lowering(x) for x in args.lowering] if args.lowering else list(Lowering)
    cells: list[tuple[object, ...]] = []
    rows: list[dict[str, Any]] = []
    for lowering in lowerings:
        example = args.example or EXAMPLE[lowering]
        launch = load_module(ROOT / "examples" / f"{example}.py").make(n, n, n)
        seed = compile_launch(cuda, launch, lowering=lowering, schedule=SEED)
        assert seed.gemm is not None
        c = seed.gemm.c.array
        seed_c = kernel_output(seed, arch, c)
        seed_s = kernel_seconds(seed, arch)
        chosen = [Schedule.parse(x) for x in args.schedule] if args.schedule else CANDIDATES
        runs = [(SEED, cuda)]
        for x in chosen:
            if x != SEED:
                runs.append((x, cuda))
                if args.converting and x.stages > 1 and not x.warpgroup:
                    runs.append((x, converting))
        for schedule, tgt in runs:
            label = schedule.name + (" converting" if tgt is converting else "")
            row: dict[str, Any] = {"lowering": lowering.value, "schedule": label}
            try:
                rw = compile_launch(tgt, launch, lowering=lowering, schedule=schedule)
                s = seed_s if schedule == SEED else kernel_seconds(rw, arch)
                same = schedule == SEED or bool(np.array_equal(kernel_output(rw, arch, c),
                                                               seed_c))
                row |= {"median_s": s, "tflops": 2.0 * n**3 / s / 1e12,
                        "vs_seed": seed_s / s, "bit_identical_to_seed": same}
                if rw.before:  # a sequence: the conversion pre-pass's share of the time
                    row["prepass_s"] = kernel_seconds(rw, arch, upto=len(rw.before))
                cells.append((lowering.value, label, f"{s * 1e3:.3f}",
                              f"{row['tflops']:.1f}", f"{row['vs_seed']:.2f}", same))
            except SarekError as e:  # too much shared memory, a schedule refused
                row["error"] = e.reason.splitlines()[0][:200]
                cells.append((lowering.value, label, "-", "-", "-", row["error"][:60]))
            rows.append(row)
    for dtype in [] if args.cublas is None else args.cublas or ["f16"]:
        s = cublas_seconds(n, dtype)
        rows.append({"baseline": f"cuBLAS {dtype}", "median_s": s,
                     "tflops": 2.0 * n**3 / s / 1e12})
        cells.append((f"cuBLAS {dtype}", "", f"{s * 1e3:.3f}", f"{rows[-1]['tflops']:.1f}", "-",
                      "-"))
    if args.cupy_int32:
        s = cupy_int32_seconds(n)
        rows.append({"baseline": "CuPy int32 matmul", "median_s": s,
                     "tflops": 2.0 * n**3 / s / 1e12})
        cells.append(("CuPy int32 matmul", "", f"{s * 1e3:.3f}", f"{rows[-1]['tflops']:.1f}",
                      "-", "-"))
    show(table(f"schedules at {n}^3 on {device_name()}",
               ("lowering", "schedule", "ms", "TFLOP/s", "x seed", "bits = seed"), cells,
               left=2))
    write("schedule_sweep_h200", {"device": device_name(), "arch": arch, "n": n,
                                  "rows": rows}, args.out)
    return 0


CUBLAS = ("f16", "bf16", "f32", "tf32")
"""The cuBLAS products ``--cublas`` times: f16, bf16, f32 with TF32 off (SGEMM) and on."""


def cublas_seconds(n: int, dtype: str = "f16") -> float:
    """The median time of cuBLAS's f16, bf16 or f32 product of two ``n`` x ``n`` random
    matrices (f32 accumulation: reduced-precision reduction off, as ``gpu_speed_h200`` times
    it; f32 with TF32 off, ``tf32`` with it on)."""
    import torch

    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    kind = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32,
            "tf32": torch.float32}[dtype]
    a = torch.randn(n, n, device="cuda", dtype=kind)
    b = torch.randn(n, n, device="cuda", dtype=kind)
    try:
        return torch_seconds(partial(torch.matmul, a, b))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False


if __name__ == "__main__":
    sys.exit(main())
