"""Speed on the H200: the rewritten GEMM kernels against cuBLAS, CuPy and the naive kernels.

At 4096^3 and 8192^3 (``--sizes``) each kernel is printed as CUDA, compiled by NVRTC for the
device and timed with CUDA events (median of 10 launches after a warm-up, the same device
buffers each time): every lowering under the schedule CUDA's policy picks (its best, from
``bench/schedule_sweep_h200.py``) and under the seed's, the naive kernels, cuBLAS (through
PyTorch: f16, bf16, and f32 without TF32) and CuPy's int32 matmul, side by side in one run.
Where the policy converts f32 operands in a pre-pass (``sarek.rewrite.prepass``), the
lowering's time is the pre-pass's and the GEMM's together, the pre-pass is also timed alone (a
row of its own, with the bytes it moves per second), and the kernel that converts each element
as it stages it (``t128x256k32s3``, ``mma.sync``) is timed beside them. The best schedule's
output (and that kernel's) is compared bit for bit with the seed's on the device (exit 1 on a
difference). Writes bench/results/gpu_speed_h200.json, prints a table with TFLOP/s (2mnk per
GEMM) and the ratios issues 27 and 28 set targets for (``RATIOS``, computed from the rates,
so that a recorded result renders with every ratio), and puts the same table as Markdown into
bench/README.md (``--readme``) between its ``gpu_speed_h200`` markers. ``--render JSON`` writes
that Markdown from a recorded result without a device.

    python -m bench.gpu_speed_h200 [--sizes 4096 8192] [--out FILE] [--readme FILE]
    python -m bench.gpu_speed_h200 --render bench/results/gpu_speed_h200.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from backends.cuda.launch import launchables
from backends.cuda.run import Launchable, device_arch, device_name, launch_steps, time_steps
from backends.pipeline import Compiled, compile_launch
from backends.registry import target
from bench.harness import RESULTS, ROOT, Timing, write
from sarek.dsl import numpy_dtype
from sarek.loader import load_module
from sarek.matrix_scheme import Lowering
from sarek.schedule import SEED, Schedule

REPEATS = 10
STAGED = Schedule.parse("t128x256k32s3")
"""The schedule operands of one converted term ran on before the conversion pre-pass
(``mma.sync``, each element converted as it is staged), timed beside the pre-pass's; a
lowering whose pipelined ``mma.sync`` schedule takes the pre-pass (Bf16x3's split terms) is
timed beside it on that schedule, splitting as it stages (``Staging.prepass_terms`` off)."""
CONVERTING = "converting as it stages"


def host_values(compiled: Compiled) -> dict[str, Any]:
    """The arguments of ``compiled``'s launch by name, each of its parameter's type: arrays
    as NumPy arrays, scalars as NumPy scalars."""
    launch = compiled.launch
    values: dict[str, Any] = {}
    for p in launch.kernel.params:
        if p.name in launch.args:
            dt = numpy_dtype(p.elem)
            value = launch.args[p.name]
            values[p.name] = np.asarray(value, dt) if hasattr(value, "shape") else dt.type(value)
    return values


def _sequence(compiled: Compiled, upto: int | None = None
              ) -> tuple[list[Launchable], dict[str, Any]]:
    """The kernels that run (a conversion pre-pass, then the GEMM; the first ``upto`` of
    them), compiled for the device, and the values they take by name, the temporaries
    included."""
    values = host_values(compiled)
    return launchables(compiled, values)[:upto], values


def kernel_seconds(compiled: Compiled, arch: str, upto: int | None = None) -> float:
    """Median seconds of the launches that run (every kernel of a sequence, or its first
    ``upto``), CUDA events around them."""
    steps, values = _sequence(compiled, upto)
    return Timing.of(time_steps(steps, values, REPEATS)).median_s


def kernel_output(compiled: Compiled, arch: str, array: str) -> np.ndarray:
    """``array`` after one launch on the device (its bit pattern)."""
    steps, values = _sequence(compiled)
    result = launch_steps(steps, values)[array]
    return result.view(f"u{result.dtype.itemsize}")


def cupy_int32_seconds(n: int) -> float:
    """The median time of CuPy's int32 matmul of two ``n`` x ``n`` matrices over the whole
    int32 range (CUDA events around each launch)."""
    import cupy

    a = cupy.random.randint(-2**31, 2**31 - 1, (n, n), dtype=cupy.int32)
    b = cupy.random.randint(-2**31, 2**31 - 1, (n, n), dtype=cupy.int32)
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    cupy.matmul(a, b)
    times = []
    for _ in range(REPEATS):
        start.record()
        cupy.matmul(a, b)
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return Timing.of(times).median_s


def torch_seconds(fn: Callable[[], object]) -> float:
    import torch

    fn()
    torch.cuda.synchronize()
    times: list[float] = []
    for _ in range(REPEATS):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3)
    return Timing.of(times).median_s


def baselines(n: int) -> dict[str, float]:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    out = {}
    for label, dt in (("cuBLAS f16", torch.float16), ("cuBLAS bf16", torch.bfloat16),
                      ("cuBLAS SGEMM (no TF32)", torch.float32),
                      ("cuBLAS TF32", torch.float32)):
        a = torch.randn(n, n, device="cuda", dtype=dt)
        b = torch.randn(n, n, device="cuda", dtype=dt)
        torch.backends.cuda.matmul.allow_tf32 = label == "cuBLAS TF32"
        out[label] = torch_seconds(partial(torch.matmul, a, b))
    torch.backends.cuda.matmul.allow_tf32 = False
    # the int8 tensor-core peak: torch's int8 product (int32 sums) with B column-major, the
    # layout cuBLASLt's int8 kernels take (a row-major B is transposed first)
    a8 = torch.randint(-128, 128, (n, n), device="cuda", dtype=torch.int8)
    b8 = torch.randint(-128, 128, (n, n), device="cuda", dtype=torch.int8).t()
    try:
        out["torch int8 matmul (_int_mm)"] = torch_seconds(partial(torch._int_mm, a8, b8))
    except Exception as e:  # a missing baseline is reported, not fatal
        print(f"torch int8 baseline unavailable: {e}")
    try:
        out["CuPy int32 matmul"] = cupy_int32_seconds(n)
    except Exception as e:  # a missing baseline is reported, not fatal
        print(f"CuPy int32 baseline unavailable: {e}")
    return out


F16, BF16, BF16X3, PLANES, F16_OF_F32 = (
    "rewritten F16_operands (gemm_f16)", "rewritten Bf16_operands (gemm_f32)",
    "rewritten Bf16x3_operands (gemm_f32)", "rewritten Int32_byte_planes (gemm_i32)",
    "rewritten F16_operands (gemm_f32)")
LOWERINGS = ((F16, "gemm_f16", Lowering.F16_OPERANDS),
             (BF16, "gemm_f32", Lowering.BF16_OPERANDS),
             (BF16X3, "gemm_f32", Lowering.BF16X3_OPERANDS),
             (PLANES, "gemm_i32", Lowering.INT32_BYTE_PLANES),
             (F16_OF_F32, "gemm_f32", Lowering.F16_OPERANDS))
RATIOS = (("F16 / cuBLAS f16", F16, "cuBLAS f16"),
          ("Bf16 / cuBLAS bf16", BF16, "cuBLAS bf16"),
          ("F16 of f32 / cuBLAS bf16", F16_OF_F32, "cuBLAS bf16"),
          ("Bf16 converting as it stages / cuBLAS bf16", f"{BF16}, {CONVERTING}",
           "cuBLAS bf16"),
          ("F16 of f32 converting as it stages / cuBLAS bf16", f"{F16_OF_F32}, {CONVERTING}",
           "cuBLAS bf16"),
          ("F16 / naive f32", F16, "naive f32 (original gemm_f32)"),
          ("Bf16x3 / cuBLAS SGEMM", BF16X3, "cuBLAS SGEMM (no TF32)"),
          ("Bf16x3 splitting as it stages / cuBLAS SGEMM", f"{BF16X3}, {CONVERTING}",
           "cuBLAS SGEMM (no TF32)"),
          ("Bf16x3 / cuBLAS TF32", BF16X3, "cuBLAS TF32"),
          ("F16 seed schedule / cuBLAS f16", f"{F16}, seed schedule", "cuBLAS f16"),
          ("byte planes / CuPy int32", PLANES, "CuPy int32 matmul"))
"""Each ratio's name, the kernel and the kernel it is measured against (rates, so a ratio above
1 is faster)."""
TARGETS = {"F16 / cuBLAS f16": 0.9, "Bf16 / cuBLAS bf16": 0.6, "F16 of f32 / cuBLAS bf16": 0.6,
           "Bf16x3 / cuBLAS SGEMM": 2.0, "byte planes / CuPy int32": 5.0}
"""The targets at 4096^3 (issues 27 and 28)."""


def ratios_of(rates: dict[str, float]) -> dict[str, float]:
    """The ``RATIOS`` whose two kernels both have a rate (TFLOP/s or Tops) in ``rates``."""
    return {what: rates[kernel] / rates[against] for what, kernel, against in RATIOS
            if kernel in rates and against in rates}


BEGIN, END = "<!-- gpu_speed_h200: begin -->", "<!-- gpu_speed_h200: end -->"
"""The markers around the table ``--readme`` rewrites (the rest of the file is kept)."""


def markdown(result: dict[str, Any]) -> str:
    """The result as a Markdown table: a row per kernel with its schedule and TFLOP/s (or
    Tops) at each size, then a row per ratio, each target beside it."""
    sizes = sorted({r["n"] for r in result["rows"]})
    speed = {(r["n"], r["kernel"]): r for r in result["rows"] if "kernel" in r}
    ratios = {n: ratios_of({k: r["tflops"] for (m, k), r in speed.items() if m == n})
              for n in sizes}
    kernels = list(dict.fromkeys(k for _, k in speed))
    lines = [f"GEMM on {result['device']} ({result['arch']}), CUDA-event medians of "
             f"{result['repeats']}, side by side in one run; TFLOP/s (Tops for integers) at "
             "2mnk.", "",
             "| kernel | schedule | " + " | ".join(f"{n}³" for n in sizes) + " |",
             "| --- | --- | " + " | ".join("---" for _ in sizes) + " |"]
    for kernel in kernels:
        at = {n: speed[n, kernel]["schedule"] for n in sizes if (n, kernel) in speed}
        named = list(dict.fromkeys(at.values()))  # one name, or each size's where they differ
        schedule = (f"`{named[0]}`" if len(named) == 1 and named[0] else ", ".join(
            f"`{x}` ({n}³)" for n, x in at.items() if x))
        cells = [f"{speed[n, kernel]['tflops']:.1f}" if (n, kernel) in speed else ""
                 for n in sizes]
        lines.append(f"| {kernel} | {schedule} | " + " | ".join(cells) + " |")
    alone = {(r["n"], r["prepass"]): r for r in result["rows"] if "prepass" in r}
    for kernel in dict.fromkeys(k for _, k in alone):
        cells = [f"{alone[n, kernel]['median_s'] * 1e3:.3f} ms, "
                 f"{alone[n, kernel]['gb_per_s']:.0f} GB/s" if (n, kernel) in alone else ""
                 for n in sizes]
        lines.append(f"| {kernel}: the conversion pre-pass alone | | " + " | ".join(cells)
                     + " |")
    for what in dict.fromkeys(w for n in sizes for w in ratios.get(n, {})):
        target = f" (target ≥ {TARGETS[what]}x at 4096³)" if what in TARGETS else ""
        cells = [f"{ratios[n][what]:.3f}x" if what in ratios.get(n, {}) else "" for n in sizes]
        lines.append(f"| {what}{target} | | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def update_readme(path: Path, table: str) -> None:
    """``path`` with the text between its markers replaced by ``table`` (the markers and
    ``table`` appended when it has none; the file made when it does not exist)."""
    text = path.read_text() if path.exists() else ""
    block = f"{BEGIN}\n{table}{END}\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        text = head + block + ("\n" + tail if tail else "")
    else:
        text = (text.rstrip("\n") + "\n\n" if text else "") + block
    path.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    parser.add_argument("--out", type=Path, default=RESULTS
                        / "gpu_speed_h200.json")
    parser.add_argument("--readme", type=Path, default=ROOT / "bench" / "README.md",
                        help="the Markdown file whose gpu_speed_h200 table is rewritten")
    parser.add_argument("--render", type=Path, metavar="JSON",
                        help="no measuring: write the table of this recorded result")
    args = parser.parse_args()
    if args.render is not None:
        update_readme(args.readme, markdown(json.loads(args.render.read_text())))
        return 0
    arch = device_arch()
    cuda = target("cuda")
    converting = replace(cuda, staging=replace(cuda.staging, prepass_terms=False))
    rows: list[dict[str, Any]] = []
    table = Table(title=f"GEMM on {device_name()} (CUDA-event medians of {REPEATS})")
    for col in ("n", "kernel", "schedule", "ms", "TFLOP/s or Tops"):
        table.add_column(col)
    for n in args.sizes:
        flops = 2.0 * n**3
        times = baselines(n)
        schedules = {label: "" for label in times}
        made = {name: load_module(ROOT / "examples" / f"{name}.py").make(n, n, n)
                for name in ("gemm_f32", "gemm_f16", "gemm_i32")}
        for label, name in (("naive f32 (original gemm_f32)", "gemm_f32"),
                            ("naive int32 (original gemm_i32)", "gemm_i32")):
            times[label] = kernel_seconds(compile_launch(cuda, made[name], rewrite=False), arch)
            schedules[label] = "original"
        same: dict[str, bool] = {}
        prepasses: list[dict[str, Any]] = []
        for label, name, lowering in LOWERINGS:
            launch = made[name]
            best = compile_launch(cuda, launch, lowering=lowering)
            seed = compile_launch(cuda, launch, lowering=lowering, schedule=SEED)
            assert best.rewritten is not None and best.gemm is not None
            times[label] = kernel_seconds(best, arch)
            schedules[label] = best.rewritten.schedule.name
            seed_label = f"{label}, seed schedule"
            times[seed_label] = kernel_seconds(seed, arch)
            schedules[seed_label] = SEED.name
            # Every schedule takes each output's products in the same order: the device must
            # give the seed's bits under the best one too.
            c = best.gemm.c.array
            seed_c = kernel_output(seed, arch, c)
            same[label] = bool(np.array_equal(kernel_output(best, arch, c), seed_c))
            if best.before:  # a conversion pre-pass, then the GEMM: also timed alone, and
                # the kernel converting each element as it stages it beside them
                schedules[label] = f"pre-pass + {schedules[label]}"
                seconds = kernel_seconds(best, arch, upto=len(best.before))
                # each element of the n x n operands read once (4 bytes), the temporaries
                # (16-bit terms, byte planes) written
                moved = 2 * n * n * 4 + sum(s.size * s.elem.bits // 8 for s in best.scratch)
                prepasses.append({"n": n, "prepass": label,
                                  "prepass_kernel": best.before[0].lowered.name,
                                  "median_s": seconds, "gb_per_s": moved / seconds / 1e9})
                assert best.rewritten is not None
                if lowering is Lowering.INT32_BYTE_PLANES:
                    continue  # int32 operands: no kernel converting as it stages compares
                plain = STAGED if best.rewritten.schedule.warpgroup else best.rewritten.schedule
                staged = compile_launch(converting, launch, lowering=lowering, schedule=plain)
                staged_label = f"{label}, {CONVERTING}"
                times[staged_label] = kernel_seconds(staged, arch)
                schedules[staged_label] = plain.name
                same[staged_label] = bool(np.array_equal(kernel_output(staged, arch, c), seed_c))
        for label, seconds in times.items():
            rows.append({"n": n, "kernel": label, "schedule": schedules[label],
                         "median_s": seconds, "tflops": flops / seconds / 1e12})
            table.add_row(str(n), label, schedules[label], f"{seconds * 1e3:.3f}",
                          f"{flops / seconds / 1e12:.1f}")
        for pre in prepasses:
            rows.append(pre)
            table.add_row(str(n), f"{pre['prepass']}: the pre-pass alone", pre["prepass_kernel"],
                          f"{pre['median_s'] * 1e3:.3f}", f"{pre['gb_per_s']:.0f} GB/s")
        ratios = ratios_of({label: flops / seconds for label, seconds in times.items()})
        rows.append({"n": n, "ratios": ratios, "best_bit_identical_to_seed": same})
        for what, r in ratios.items():
            table.add_row(str(n), what, "", "", f"{r:.3f}x")
    Console(width=140).print(table)
    result = {"device": device_name(), "arch": arch, "repeats": REPEATS, "rows": rows,
              "targets (4096^3)": {k: f">= {v}" for k, v in TARGETS.items()}}
    write("gpu_speed_h200", result, args.out)
    update_readme(args.readme, markdown(result))
    return 0 if all(all(r["best_bit_identical_to_seed"].values()) for r in rows
                    if "best_bit_identical_to_seed" in r) else 1


if __name__ == "__main__":
    sys.exit(main())
