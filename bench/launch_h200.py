"""The launch path on the H200: what ``kernel[grid, block](*args)`` costs beside its peers.

Measured in one run, side by side (medians):

* **warm launch overhead**: host seconds per launch of a small kernel (``y = s * x`` over 1024
  f32) on CuPy arrays, 2000 launches back to back then one synchronize, repeated 15 times:
  sarek's ``kernel[grid, block]``, CuPy's ``RawKernel`` on the same printed CUDA, and
  ``numba.cuda`` on the same kernel written for numba;
* **first call**: a new Python process that imports sarek, defines the GEMM kernel and launches
  it once on CuPy arrays at 512^3, with an empty cache (recognize, rewrite, print, NVRTC) and
  again with the cache the first process filled (no NVRTC): wall seconds, 5 processes each;
* **a 4096^3 GEMM** on PyTorch tensors (``examples/gemm_f16.py``) through ``kernel[grid,
  block]``, against the same rewritten kernel (the same cubin) through
  ``backends.cuda.run.time_cubin``: CUDA events around 10 launches issued back to back, median
  of 10 such after a warm-up each.

Writes bench/results/launch_h200.json and prints a table. Targets (issue "Call it from
Python"): warm overhead at most 1.5x CuPy's; a cached first call under 0.5 s; the GEMM within
noise of the runner. Run it where the packages are byte-compiled, as an installation leaves
them: wheels installed with ``--no-compile`` and a fresh source tree recompile every module
in every new process (0.4 to 0.5 s of the first call on the H200); ``python -m compileall``
first.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import Any

import numpy as np

import sarek
from backends.cuda.launch import cubin
from backends.cuda.run import device_arch, device_name, time_cubin
from backends.cuda.shared import dynamic_bytes
from backends.pipeline import compile_launch
from backends.registry import target
from bench.harness import ROOT, write
from sarek import Global, block_dim, block_idx, f32, i32, thread_idx
from sarek.loader import load_module

LAUNCHES, ROUNDS = 2000, 15
TOGETHER = 10  # GEMM launches issued back to back between two events, as a program issues them


@sarek.kernel
def scale(x: Global[f32], y: Global[f32], s: f32, n: i32):
    i = block_idx.x * block_dim.x + thread_idx.x
    if i < n:
        y[i] = s * x[i]


def per_launch(launch: Any, sync: Any) -> float:
    """Median over ``ROUNDS`` of host seconds per launch of ``launch()``."""
    launch()
    sync()
    rounds = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(LAUNCHES):
            launch()
        sync()
        rounds.append((time.perf_counter() - start) / LAUNCHES)
    return statistics.median(rounds)


def warm_overhead() -> dict[str, Any]:
    import cupy

    n = 1024
    x = cupy.arange(n, dtype=cupy.float32)
    y = cupy.zeros(n, dtype=cupy.float32)
    s, count = np.float32(2.5), np.int32(n)
    sync = cupy.cuda.get_current_stream().synchronize
    run = scale.with_options(target="cuda")[(n // 256, 1, 1), (256, 1, 1)]
    ours = per_launch(lambda: run(x, y, s, n), sync)
    raw = cupy.RawKernel(sarek.emit(scale.ir, "cuda"), "scale")
    theirs = per_launch(lambda: raw((n // 256,), (256,), (x, y, s, count)), sync)

    assert cupy.allclose(y, 2.5 * x)
    return {"sarek": ours, "cupy_rawkernel": theirs, "numba_cuda": numba_overhead(x, y, s, n)}


def numba_overhead(x: Any, y: Any, s: np.float32, n: int) -> float | str:
    """numba.cuda's per-launch seconds on the same kernel, or why it could not run."""
    import cupy

    try:
        from numba import cuda

        @cuda.jit
        def numba_scale(xs: Any, ys: Any, factor: float, m: int) -> None:
            i = cuda.grid(1)
            if i < m:
                ys[i] = factor * xs[i]

        nx, ny = cuda.as_cuda_array(x), cuda.as_cuda_array(y)
        numba_scale[n // 256, 256](nx, ny, s, n)
    except Exception as e:  # numba-cuda may not work beside this NumPy
        return f"numba.cuda does not run here: {type(e).__name__}: {e}"
    return per_launch(lambda: numba_scale[n // 256, 256](nx, ny, s, n),
                      cupy.cuda.get_current_stream().synchronize)


FIRST_CALL = textwrap.dedent("""
    import time
    start = time.perf_counter()
    import numpy as np, cupy
    cupy.zeros(1)  # the CUDA context, which any GPU program pays for
    framework = time.perf_counter()
    import sarek
    from sarek import Global, f16, f32, i32, thread_idx, block_idx, block_dim
    imported = time.perf_counter()

    @sarek.kernel
    def matmul(a: Global[f16], b: Global[f16], c: Global[f32], m: i32, n: i32, k: i32):
        row = block_idx.y * block_dim.y + thread_idx.y
        col = block_idx.x * block_dim.x + thread_idx.x
        if row < m and col < n:
            acc = f32(0.0)
            for p in range(k):
                acc += f32(a[row * k + p]) * f32(b[p * n + col])
            c[row * n + col] = acc

    s = 512
    a = cupy.ones(s * s, cupy.float16); b = cupy.ones(s * s, cupy.float16)
    c = cupy.zeros(s * s, cupy.float32)
    matmul[(s // 16, s // 16, 1), (16, 16, 1)](a, b, c, s, s, s)
    cupy.cuda.get_current_stream().synchronize()
    assert float(c[0]) == s
    end = time.perf_counter()
    print(framework - start, imported - framework, end - imported, end - framework)
""")


def first_calls(processes: int = 5) -> dict[str, list[list[float]]]:
    """Per process: seconds to import NumPy and CuPy and make the CUDA context, to import
    sarek, to define the kernel and launch it once, and the last two together (the figure the
    target is for: what sarek adds to a GPU program's start)."""
    out: dict[str, list[list[float]]] = {"empty_cache": [], "cached": []}
    for _ in range(processes):
        with tempfile.TemporaryDirectory() as folder:
            env = {**os.environ, "SAREK_CACHE_DIR": folder,
                   "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"}
            for what in ("empty_cache", "cached"):
                with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
                    f.write(FIRST_CALL)
                done = subprocess.run([sys.executable, f.name], env=env, capture_output=True,
                                      text=True, check=True)
                out[what].append([float(x) for x in done.stdout.split()[-4:]])
    return out


def gemm_4096() -> dict[str, float]:
    import torch

    module = load_module(ROOT / "examples" / "gemm_f16.py")
    size = 4096
    run = module.make(size, size, size)
    function = next(v for v in vars(module).values() if isinstance(v, sarek.KernelFunction))
    cuda_fn = function.with_options(target="cuda")
    names = [p.name for p in run.kernel.params]
    tensors = [torch.from_numpy(np.ascontiguousarray(run.args[n])).cuda()
               if isinstance(run.args[n], np.ndarray) else run.args[n] for n in names]
    call = cuda_fn[run.grid, run.block]
    call(*tensors)
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(TOGETHER):
            call(*tensors)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3 / TOGETHER)
    done = compile_launch(target("cuda"), run)  # what the call ran (its record's source)
    _, binary = cubin(done.text, done.lowered.name, device_arch())
    extra = done.launch.kernel.params[len(names):]
    params = [np.ascontiguousarray(v) if isinstance(v, np.ndarray) else v
              for v in (run.args[n] for n in names)]
    params += [np.int32(done.launch.args[p.name]) for p in extra]  # the region's values
    runner = time_cubin(binary, done.lowered.name, params, done.launch.grid, done.launch.block,
                        10, dynamic_bytes(done.lowered), TOGETHER)
    flops = 2.0 * size**3
    return {"launch_path_s": statistics.median(times), "runner_s": statistics.median(runner),
            "launch_path_tflops": flops / statistics.median(times) / 1e12,
            "runner_tflops": flops / statistics.median(runner) / 1e12,
            "schedule": done.rewritten.schedule.name if done.rewritten else "original"}


def main() -> int:
    warm = warm_overhead()
    first = first_calls()
    gemm = gemm_4096()
    result = {"device": device_name(), "arch": device_arch(), "launches": LAUNCHES,
              "rounds": ROUNDS, "warm_overhead_s": warm,
              "warm_ratio_to_cupy": warm["sarek"] / warm["cupy_rawkernel"],
              "first_call_s": first,
              "first_call_parts": ["cupy and the CUDA context", "import sarek",
                                   "define and first launch", "sarek's part (the two)"],
              "first_call_median_s": {k: [statistics.median(p[i] for p in v) for i in range(4)]
                                      for k, v in first.items()},
              "gemm_4096_f16": gemm}
    write("launch_h200", result)
    numba = warm["numba_cuda"]
    shown = f"{numba * 1e6:7.2f}" if isinstance(numba, float) else "n/a"
    print(f"{'warm launch overhead (median, us)':44} sarek {warm['sarek'] * 1e6:7.2f}  "
          f"CuPy RawKernel {warm['cupy_rawkernel'] * 1e6:7.2f}  numba.cuda {shown}  "
          f"ratio to CuPy {result['warm_ratio_to_cupy']:.2f}")
    if not isinstance(numba, float):
        print(numba)
    med = result["first_call_median_s"]
    print(f"{'first call in a new process (median, s)':44} empty cache "
          f"{med['empty_cache'][3]:.3f}  cached {med['cached'][3]:.3f} (import sarek "
          f"{med['cached'][1]:.3f}, define and launch {med['cached'][2]:.3f}; CuPy and the "
          f"context before them {med['cached'][0]:.3f})")
    print(f"{'GEMM 4096^3 f16 (median, TFLOP/s)':44} kernel[grid, block] "
          f"{gemm['launch_path_tflops']:.1f}  runner {gemm['runner_tflops']:.1f}  "
          f"({gemm['schedule']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
