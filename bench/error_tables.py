"""Accuracy of the float lowerings against float64: error tables and a plot of error against K.

For f32 GEMMs ``C = A B`` (``examples/gemm_f32.py``'s naive kernel and its rewrites under
``F16_operands``, ``Bf16_operands`` and ``Bf16x3_operands``, CUDA's staging, tensor cores) on
three input classes, each result ``X`` is compared with ``C64``, the float64 product of the
same f32 inputs:

* ``normwise``: ``||X - C64||_F / ||C64||_F``;
* ``elementwise``: ``max_ij |X - C64|_ij / |C64|_ij`` over the nonzero ``C64_ij``;
* ``componentwise``: ``max_ij |X - C64|_ij / (|A| |B|)_ij``, the error of each dot product
  against the size of its terms (what the standard bounds bound).

Input classes: ``random`` (entries N(0, 1)); ``wide range`` (``(U(0,1) - 1/2) exp(2 N(0,1))``,
the Ozaki-scheme papers' test matrices with phi = 2: entries over about 2^-20 to 2^14);
``cancelling`` (``A = [A1 A1]``, ``B = [B1; -B1 + 2^-10 B2]``: every dot product cancels to
2^-10 of its terms, ``|A||B| / |AB|`` about 2^11). Beside the lowerings stand the original f32
kernel (sequential f32, no contraction), NumPy's f32 ``matmul`` (the CPU's BLAS) and, on a
device, cuBLAS SGEMM with TF32 off (CuPy).

On the GPU machine (the default) every kernel runs on device 0 through ``backends.cuda.run``
and, at one small size, its output is checked bit for bit against ``sarek.simulate(...,
target="cuda")``; writes bench/results/error_tables.json. ``--sim`` computes the same table
with the simulator (the printed CUDA kernel, lane by lane, ``h200`` model) at small sizes and
writes bench/results/error_tables_sim.json. Each writes a PNG of the normwise error against K
beside its JSON when matplotlib is installed (``pip install 'sarek[bench]'``); ``--plot
FILE.json`` draws it again from a recorded JSON. Run: ``python -m bench.error_tables [--sim]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from backends.pipeline import Compiled, compile_launch
from backends.registry import target
from bench import harness
from bench.harness import RESULTS, ROOT
from sarek.loader import load_module
from sarek.matrix_scheme import Lowering

LOWERINGS = (Lowering.F16_OPERANDS, Lowering.BF16_OPERANDS, Lowering.BF16X3_OPERANDS)
ORIGINAL = "f32 kernel (original)"
NUMPY = "NumPy f32 matmul (CPU BLAS)"
CUBLAS = "cuBLAS SGEMM (TF32 off)"
SEED = 15
DELTA = 2.0**-10  # the cancelling class: what survives of each dot product
PHI = 2.0  # the wide-range class: exp(PHI * N(0, 1))
CHECK_SHAPE = (96, 80, 48)  # device against simulator, bit for bit


@dataclasses.dataclass(frozen=True)
class Plan:
    """The table's cubes and the plot's GEMMs (M = N = ``sweep_mn``, K from ``sweep_k``)."""

    sizes: tuple[int, ...]
    sweep_mn: int
    sweep_k: tuple[int, ...]


DEVICE = Plan((128, 256, 512, 1024), 256, (16, 64, 256, 1024, 4096, 16384))
SIMULATOR = Plan((64, 128, 256), 64, (16, 64, 256, 1024, 4096))
Run = Callable[[Compiled], np.ndarray]  # the output c of a compiled launch


def inputs(kind: str, m: int, n: int, k: int, rng: np.random.Generator
           ) -> tuple[np.ndarray, np.ndarray]:
    """``A`` (m x k) and ``B`` (k x n), f32, of input class ``kind``."""
    if kind == "random":
        return (rng.standard_normal((m, k)).astype(np.float32),
                rng.standard_normal((k, n)).astype(np.float32))
    if kind == "wide range":
        def wide(shape: tuple[int, int]) -> np.ndarray:
            return ((rng.random(shape) - 0.5) * np.exp(PHI * rng.standard_normal(shape))
                    ).astype(np.float32)
        return wide((m, k)), wide((k, n))
    if kind == "cancelling":
        half = k // 2
        a1 = rng.standard_normal((m, half))
        b1, b2 = rng.standard_normal((half, n)), rng.standard_normal((half, n))
        a = np.concatenate([a1, a1], axis=1).astype(np.float32)
        return a, np.concatenate([b1, -b1 + DELTA * b2]).astype(np.float32)
    raise ValueError(f"unknown input class {kind!r}")


KINDS = ("random", "wide range", "cancelling")


def errors(x: np.ndarray, a: np.ndarray, b: np.ndarray, c64: np.ndarray) -> dict[str, float]:
    """The three error measures of the module's docstring."""
    diff = np.abs(x.astype(np.float64) - c64)
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    nonzero = c64 != 0
    return {"normwise": float(np.linalg.norm(diff) / np.linalg.norm(c64)),
            "elementwise": float((diff[nonzero] / np.abs(c64[nonzero])).max()),
            "componentwise": float((diff[scale > 0] / scale[scale > 0]).max())}


def launches(m: int, n: int, k: int, a: np.ndarray, b: np.ndarray) -> dict[str, Compiled]:
    """The original f32 kernel's launch on ``a``, ``b`` and its rewrite under each lowering,
    as the CUDA target compiles them (its staging and schedule policy; a rewrite may be a
    sequence, the conversion pre-pass first)."""
    made = load_module(ROOT / "examples" / "gemm_f32.py").make(m, n, k)
    original = dataclasses.replace(made, args={**made.args, "a": a.ravel(), "b": b.ravel()})
    cuda = target("cuda")
    out = {ORIGINAL: compile_launch(cuda, original, rewrite=False)}
    for lowering in LOWERINGS:
        out[lowering.value] = compile_launch(cuda, original, lowering=lowering)
    return out


def simulated(compiled: Compiled) -> np.ndarray:
    """``c`` after the launches in the simulator: the CUDA-lowered kernels (``h200``
    model)."""
    return compiled.steps.simulate(target="cuda")["c"]


class Device:
    """Runs the launches on device 0."""

    def __init__(self) -> None:
        from backends.cuda.run import device_arch, device_name

        self.arch, self.name = device_arch(), device_name()

    def __call__(self, compiled: Compiled) -> np.ndarray:
        from bench.gpu_speed_h200 import kernel_output

        return kernel_output(compiled, self.arch, "c").view(np.float32)


def cublas(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    os.environ["CUPY_TF32"] = "0"  # CuPy's default too: f32 matmul is SGEMM, not TF32
    cupy = importlib.import_module("cupy")
    return np.asarray(cupy.asnumpy(cupy.matmul(cupy.asarray(a), cupy.asarray(b))))


def table(run: Run, shapes: list[tuple[str, int, int, int]], on_device: bool, seed: int = SEED
          ) -> list[dict[str, Any]]:
    """One row per (shape, input class, method), the inputs drawn in turn from ``seed``."""
    rows: list[dict[str, Any]] = []
    rng = np.random.default_rng(seed)
    for group, m, n, k in shapes:
        for kind in KINDS:
            a, b = inputs(kind, m, n, k, rng)
            c64 = a.astype(np.float64) @ b.astype(np.float64)
            results = {name: run(compiled).reshape(m, n)
                       for name, compiled in launches(m, n, k, a, b).items()}
            results[NUMPY] = a @ b
            if on_device:
                results[CUBLAS] = cublas(a, b)
            for method, x in results.items():
                rows.append({"group": group, "m": m, "n": n, "k": k, "inputs": kind,
                             "method": method, **errors(x, a, b, c64)})
            print(f"{group:6} {m}x{n}x{k} {kind}: done")
    return rows


def device_check(device: Device) -> dict[str, bool]:
    """Every method's output at ``CHECK_SHAPE`` on the device against the simulator, bits."""
    m, n, k = CHECK_SHAPE
    a, b = inputs("random", m, n, k, np.random.default_rng(SEED))
    return {name: bool(np.array_equal(device(compiled).view(np.uint32),
                                      simulated(compiled).view(np.uint32)))
            for name, compiled in launches(m, n, k, a, b).items()}


def plot(report: dict[str, Any], path: Path) -> bool:
    """The normwise error against K (the sweep's rows), one panel per input class; False
    when matplotlib is missing."""
    try:
        importlib.import_module("matplotlib").use("Agg")
        plt = importlib.import_module("matplotlib.pyplot")
    except ImportError:
        print("matplotlib is not installed (pip install 'sarek[bench]'): no PNG; "
              "draw it later with --plot FILE.json")
        return False
    sweep = [r for r in report["rows"] if r["group"] == "sweep"]
    methods = list(dict.fromkeys(r["method"] for r in sweep))
    fig, axes = plt.subplots(1, len(KINDS), figsize=(5 * len(KINDS), 4.2), sharey=True)
    for ax, kind in zip(axes, KINDS, strict=True):
        for method in methods:
            points = sorted((r["k"], r["normwise"]) for r in sweep
                            if r["inputs"] == kind and r["method"] == method)
            ax.loglog(*zip(*points, strict=True), marker="o", label=method, base=2)
        ax.set_title(f"{kind} inputs")
        ax.set_xlabel("K")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("||X - C64||_F / ||C64||_F")
    axes[0].legend(fontsize=7)
    mn = sweep[0]["m"] if sweep else 0
    fig.suptitle(f"f32 GEMM {mn}x{mn}xK against float64: {report['where']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")
    return True


def print_table(report: dict[str, Any]) -> None:
    harness.show(harness.table(
        f"f32 GEMM errors against float64 ({report['where']})",
        ("size", "inputs", "method", "normwise", "elementwise", "componentwise"),
        [(f"{r['m']}x{r['n']}x{r['k']}", r["inputs"], r["method"], f"{r['normwise']:.2e}",
          f"{r['elementwise']:.2e}", f"{r['componentwise']:.2e}")
         for r in report["rows"] if r["group"] == "cube"], left=3))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--sim", action="store_true", help="the simulator instead of the GPU")
    mode.add_argument("--plot", type=Path, metavar="FILE.json",
                      help="draw the PNG from a recorded JSON, nothing else")
    parser.add_argument("--sizes", type=int, nargs="+", help="the cubes of the table")
    parser.add_argument("--sweep-k", type=int, nargs="+", help="the K of the plot")
    parser.add_argument("--sweep-mn", type=int, help="M = N of the plot's GEMMs")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for JSON and PNG")
    parser.add_argument("--seed", type=int, default=SEED,
                        help=f"the inputs' random seed (default {SEED})")
    options = parser.parse_args(argv)
    if options.plot is not None:
        recorded = json.loads(options.plot.read_text())
        plot(recorded, options.plot.parent / recorded["plot"])
        return 0
    defaults = SIMULATOR if options.sim else DEVICE
    mn = options.sweep_mn or defaults.sweep_mn
    shapes = ([("cube", s, s, s) for s in options.sizes or defaults.sizes]
              + [("sweep", mn, mn, k) for k in options.sweep_k or defaults.sweep_k])
    report: dict[str, Any] = {
        "definitions": {"normwise": "||X - C64||_F / ||C64||_F",
                        "elementwise": "max |X - C64|_ij / |C64|_ij over C64_ij != 0",
                        "componentwise": "max |X - C64|_ij / (|A| |B|)_ij"},
        "inputs": {"random": "N(0, 1)",
                   "wide range": f"(U(0,1) - 1/2) exp({PHI} N(0, 1))",
                   "cancelling": f"A = [A1 A1], B = [B1; -B1 + {DELTA} B2], all N(0, 1)"},
        "seed": options.seed}
    if options.sim:
        report["where"] = "simulator: the CUDA-lowered kernels, h200 model"
        report["rows"] = table(simulated, shapes, on_device=False, seed=options.seed)
        stem, report["plot"] = "error_tables_sim", "error_vs_k_sim.png"
    else:
        device = Device()
        check = device_check(device)
        print("device equals simulator at", "x".join(map(str, CHECK_SHAPE)), check)
        report["where"] = f"{device.name} ({device.arch})"
        report["device_equals_simulator"] = check
        report["check_shape"] = list(CHECK_SHAPE)
        report["rows"] = table(device, shapes, on_device=True, seed=options.seed)
        stem, report["plot"] = "error_tables", "error_vs_k.png"
    path = harness.write(stem, report, options.out / f"{stem}.json")
    print_table(report)
    print(f"wrote {path}")
    plot(report, options.out / report["plot"])
    return 0 if all(report.get("device_equals_simulator", {}).values()) else 1


if __name__ == "__main__":
    sys.exit(main())
