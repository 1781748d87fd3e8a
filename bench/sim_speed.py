"""Simulator speed and memory (issue 16), with Triton's interpreter and tinygrad's PYTHON
device side by side where they are installed.

Cases, each size in its own process (a fresh heap, no cache carried over): the naive f32 GEMM
(``examples/gemm_f32.py``), the shared-memory tiled f32 GEMM (``examples/gemm_tiled.py``), the
F16 rewrite of ``examples/gemm_f16.py`` and the Bf16x3 rewrite of ``examples/gemm_f32.py``
under the ``h200`` model (subgroup 32, fragment 16), at 128^3 to 1024^3. Each process runs the
case once as a warm-up with ``tracemalloc`` on (its peak is the case's peak memory: NumPy's
arrays are traced), then ``repeats`` times untraced; the median is reported. The growth
exponent of a case is ``log(t(1024) / t(256)) / log(4)`` (3 is n^3).

Peers (optional, ``pip install -e .[bench-peers]`` or any interpreter given with
``--peers-python``; never a dependency of the tests): Triton's interpreter
(``TRITON_INTERPRET=1``) on an f32 matmul over NumPy arrays tiled 64x64x32, 128x128x32 and
128x128x128 (the best tile size is the one compared), and tinygrad's PYTHON device
(``DEV=PYTHON``) on a 128^3 f32 matmul. A peer that is not importable is reported as missing.

Prints a table and writes bench/results/sim_speed.json. Targets are reported, never asserted.
``bench/rewrite_speed.py`` measures every lowering against its original. Run from the
checkout: ``python -m bench.sim_speed [--cases CASE ...] [--sizes N ...] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import RESULTS, ROOT, machine, relative, show, table, wall, write

SIM_CASES = ("naive f32", "tiled f32", "F16 h200", "Bf16x3 h200")
TRITON_TILES = ((64, 64, 32), (128, 128, 32), (128, 128, 128))
TRITON_CASES = tuple(f"triton interpreter {bm}x{bn}x{bk}" for bm, bn, bk in TRITON_TILES)
PEER_CASES = (*TRITON_CASES, "tinygrad PYTHON")
SIZES = {"naive f32": (128, 256, 512, 1024), "tiled f32": (128, 256, 512, 1024),
         "F16 h200": (128, 256, 512, 1024), "Bf16x3 h200": (128, 256, 512, 1024),
         "tinygrad PYTHON": (128,), **{case: (128, 256, 512) for case in TRITON_CASES}}
TARGETS_S = {("naive f32", 512): 0.25, ("tiled f32", 512): 0.55, ("F16 h200", 512): 1.2,
             ("Bf16x3 h200", 512): 7.0}
TARGETS_MB = {("F16 h200", 512): 100.0}


def repeats(case: str, size: int) -> int:
    if case == "tinygrad PYTHON" or (case == "Bf16x3 h200" and size >= 1024):
        return 1
    return 5 if size <= 256 else 3


# --------------------------------------------------------------------------- the cases


def sim_case(case: str, size: int) -> Callable[[], object]:
    from sarek.loader import load_module
    from sarek.matrix_rewrite import rewrite_launch
    from sarek.matrix_scheme import Lowering

    stem = {"naive f32": "gemm_f32", "tiled f32": "gemm_tiled", "F16 h200": "gemm_f16",
            "Bf16x3 h200": "gemm_f32"}[case]
    launch = load_module(ROOT / "examples" / f"{stem}.py").make(size, size, size)
    if case in ("naive f32", "tiled f32"):
        simulate: Callable[[], object] = launch.simulate
        return simulate
    lowering = Lowering.F16_OPERANDS if case == "F16 h200" else Lowering.BF16X3_OPERANDS
    rewritten = rewrite_launch(launch, lowering=lowering, subgroup=32, frag=16).launch
    return lambda: rewritten.simulate(subgroup=32, arith="h200")


def triton_case(size: int, tile: tuple[int, int, int]) -> Callable[[], object]:
    os.environ["TRITON_INTERPRET"] = "1"
    # an optional peer, typed or not, installed here or not
    import triton  # type: ignore[import-not-found, unused-ignore]
    import triton.language as tl  # type: ignore[import-not-found, unused-ignore]
    from triton.runtime import interpreter  # type: ignore[import-not-found, unused-ignore]

    class HostTensor:
        """A NumPy array as the interpreter sees a tensor: a host pointer and a dtype."""

        def __init__(self, array: np.ndarray) -> None:
            self.array, self.dtype = array, "torch.float32"

        def data_ptr(self) -> int:
            return int(self.array.ctypes.data)

    # The arrays already live on the host: nothing to copy there and back (that needs torch).
    interpreter.GridExecutor._init_args_hst = lambda self, args, kwargs: (list(args),
                                                                          dict(kwargs))
    interpreter.GridExecutor._restore_args_dev = lambda self, *args: None

    @triton.jit  # type: ignore[untyped-decorator, misc, unused-ignore]
    def matmul(a: Any, b: Any, c: Any, m: Any, n: Any, k: Any, bm: tl.constexpr,
               bn: tl.constexpr, bk: tl.constexpr) -> None:
        rows = tl.program_id(0) * bm + tl.arange(0, bm)
        cols = tl.program_id(1) * bn + tl.arange(0, bn)
        depth = tl.arange(0, bk)
        acc = tl.zeros((bm, bn), dtype=tl.float32)
        for p in range(0, k, bk):
            x = tl.load(a + rows[:, None] * k + (p + depth)[None, :])
            y = tl.load(b + (p + depth)[:, None] * n + cols[None, :])
            acc += tl.dot(x, y)
        tl.store(c + rows[:, None] * n + cols[None, :], acc)

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((size, size), dtype=np.float32) for _ in range(2))
    c = np.zeros((size, size), np.float32)
    bm, bn, bk = tile
    grid = (size // bm, size // bn)
    return lambda: matmul[grid](HostTensor(a), HostTensor(b), HostTensor(c), size, size, size,
                                bm, bn, bk)


def tinygrad_case(size: int) -> Callable[[], object]:
    os.environ["DEV"] = "PYTHON"
    from tinygrad import Tensor  # type: ignore[import-not-found, unused-ignore]

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((size, size), dtype=np.float32) for _ in range(2))
    return lambda: (Tensor(a) @ Tensor(b)).numpy()


def measure(case: str, size: int, count: int) -> dict[str, Any]:
    """Runs in the worker process: warm-up traced, then ``count`` timed runs."""
    if case in TRITON_CASES:
        fn = triton_case(size, TRITON_TILES[TRITON_CASES.index(case)])
    elif case == "tinygrad PYTHON":
        fn = tinygrad_case(size)
    else:
        fn = sim_case(case, size)
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    timing = wall(fn, count)
    return {"median_s": timing.median_s, "times_s": list(timing.seconds),
            "peak_mb": peak / 2**20}


# --------------------------------------------------------------------------- the driver


def run_case(python: str, case: str, size: int) -> dict[str, Any]:
    cmd = [python, "-m", "bench.sim_speed", "--worker", case, str(size),
           str(repeats(case, size))]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT)
    if done.returncode:
        lines = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()
        return {"error": lines[-1]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def peer_python(given: str | None) -> str | None:
    """The interpreter the peers run in: ``--peers-python``, else this one when it has them."""
    if given:
        return given
    probe = ("import importlib.util as u; "
             "print(bool(u.find_spec('triton') or u.find_spec('tinygrad')))")
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                           check=False).stdout.strip()
    return sys.executable if found == "True" else None


def exponent(rows: list[dict[str, Any]], case: str) -> float | None:
    t: dict[int, float] = {r["size"]: r["median_s"] for r in rows
                           if r["case"] == case and "median_s" in r}
    if t.get(256) and t.get(1024):
        return math.log(t[1024] / t[256]) / math.log(4)
    return None


def best_triton(rows: list[dict[str, Any]]) -> dict[int, float]:
    """Triton's interpreter at its best tile size, by size."""
    best: dict[int, float] = {}
    for r in rows:
        if r["case"] in TRITON_CASES and "median_s" in r:
            best[r["size"]] = min(best.get(r["size"], math.inf), r["median_s"])
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", nargs=3, metavar=("CASE", "SIZE", "REPEATS"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--peers-python", help="an interpreter with triton and/or tinygrad")
    parser.add_argument("--cases", nargs="*", default=[*SIM_CASES, *PEER_CASES])
    parser.add_argument("--sizes", type=int, nargs="*",
                        help="only these sizes of each case (default: all of the case's)")
    parser.add_argument("--out", type=Path, default=RESULTS / "sim_speed.json")
    args = parser.parse_args()
    if args.worker:
        case, size, count = args.worker
        print(json.dumps(measure(case, int(size), int(count))))
        return

    peers = peer_python(args.peers_python)
    rows: list[dict[str, Any]] = []
    for case in args.cases:
        python = sys.executable if case in SIM_CASES else peers
        for size in SIZES[case]:
            if args.sizes and size not in args.sizes:
                continue
            row: dict[str, Any] = {"case": case, "size": size}
            row |= run_case(python, case, size) if python else {"error": "not installed"}
            if (case, size) in TARGETS_S and "median_s" in row:
                row["target_s"] = TARGETS_S[case, size]
                row["meets_time"] = row["median_s"] <= row["target_s"]
            if (case, size) in TARGETS_MB and "peak_mb" in row:
                row["target_mb"] = TARGETS_MB[case, size]
                row["meets_memory"] = row["peak_mb"] <= row["target_mb"]
            rows.append(row)
            print(f"{case} {size}: {row.get('median_s', row.get('error'))}", file=sys.stderr)
    exponents = {case: exponent(rows, case) for case in SIM_CASES if case in args.cases}
    triton = best_triton(rows)
    host = machine()
    path = write("sim_speed", {
        "machine": host["machine"], "cpus": host["cpus"], "python": host["python"],
        "numpy": host["numpy"], "peers_python": peers, "rows": rows,
        "exponents_256_to_1024": exponents, "triton_best_s": triton,
        "speedup_over_best_triton": {f"{r['case']} {r['size']}": triton[r["size"]] / r["median_s"]
                                     for r in rows if r["case"] in SIM_CASES
                                     and r["size"] in triton and "median_s" in r},
    }, args.out)
    show(table("simulator speed (median after a warm-up, one process per case)",
               ("case", "size", "median", "peak", "peer at size", "target"),
               [_cells(r, triton) for r in rows]),
         *(f"{case}: time grows as n^{e:.2f} from 256^3 to 1024^3" if e is not None
           else f"{case}: no exponent (a size is missing)" for case, e in exponents.items()),
         f"wrote {relative(path)}")


def _cells(r: dict[str, Any], triton: dict[int, float]) -> tuple[object, ...]:
    """A row of the table: the case's median and peak beside the best Triton and its target."""
    if "median_s" not in r:
        return (r["case"], r["size"], r["error"], None, None, None)
    peer = (f"triton {triton[r['size']]:.3f} s ({triton[r['size']] / r['median_s']:.1f}x)"
            if r["case"] in SIM_CASES and r["size"] in triton else None)
    target = ""
    if "target_s" in r:
        target = f"<= {r['target_s']} s {'ok' if r['meets_time'] else 'MISSED'}"
    if "target_mb" in r:
        target += f", <= {r['target_mb']:.0f} MB {'ok' if r['meets_memory'] else 'MISSED'}"
    return (r["case"], f"{r['size']}^3", f"{r['median_s']:.3f} s", f"{r['peak_mb']:.0f} MB",
            peer, target)


if __name__ == "__main__":
    main()
