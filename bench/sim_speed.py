"""Simulator speed: the naive and the shared-memory tiled f32 GEMM at 128^3 and 256^3, then
the rewritten kernels per lowering and fragment against their originals (``rewrite_speed``).

Prints a table and writes bench/results/sim_speed.json: the median of several runs of
``sim.simulate`` per kernel and size, NumPy's own float32 matmul at the same size measured in
the same run, and their ratio. The targets (DESIGN.md) are 0.09 s for a 128^3 GEMM and 2 s for
the naive 256^3 one on a 2-core machine; they are reported, never asserted.
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import rewrite_speed  # noqa: E402  (bench/ is the script's folder, first on sys.path)
from rewrite_speed import median_seconds  # noqa: E402

from sarek.loader import load_module  # noqa: E402

KERNELS = {"naive f32 (gemm_f32)": "gemm_f32", "tiled f32 (gemm_tiled)": "gemm_tiled"}
SIZES = (128, 256)
TARGETS = {128: 0.09, 256: 2.0}


def main() -> None:
    rows = []
    for label, stem in KERNELS.items():
        module = load_module(ROOT / "examples" / f"{stem}.py")
        for size in SIZES:
            launch = module.make(size, size, size)
            a = launch.args["a"].reshape(size, size)
            b = launch.args["b"].reshape(size, size)
            repeats = 7 if size <= 128 else 3
            sim = median_seconds(launch.simulate, repeats)
            ref = median_seconds(lambda a=a, b=b: a @ b, 21)
            rows.append({"kernel": label, "size": size, "simulate_s": sim, "numpy_matmul_s": ref,
                         "ratio_to_numpy": sim / ref, "target_s": TARGETS[size],
                         "meets_target": sim <= TARGETS[size], "repeats": repeats})
    print(f"{'kernel':26} {'size':>5} {'simulate':>10} {'numpy @':>10} {'ratio':>8} "
          f"{'target':>7}")
    for r in rows:
        print(f"{r['kernel']:26} {r['size']:>5} {r['simulate_s'] * 1e3:>8.1f}ms "
              f"{r['numpy_matmul_s'] * 1e6:>8.1f}us {r['ratio_to_numpy']:>8.0f} "
              f"{r['target_s']:>6}s {'ok' if r['meets_target'] else 'MISSED'}")
    out = ROOT / "bench" / "results" / "sim_speed.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": platform.processor() or platform.machine(),
                               "python": platform.python_version(),
                               "numpy": np.__version__, "rows": rows}, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}\n")
    rewrite_speed.main()  # the rewritten kernels, each against its original


if __name__ == "__main__":
    main()
