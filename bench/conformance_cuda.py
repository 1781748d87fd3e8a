"""Every bundled GEMM example on a real GPU against the simulator, bit for bit: the original
kernels, and their rewrites onto tensor cores.

Each kernel is printed as CUDA, compiled with NVRTC for the device and run there on the same
inputs the simulator gets; every output word is compared. The rewritten kernels (subgroup 32,
fragment 16, every lowering that takes the example's operands) are simulated with the ``h200``
arithmetic model. Writes bench/results/conformance_cuda_h200.json and prints a table. Needs an
NVIDIA GPU.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backends.cuda.run import device_arch, device_name, run  # noqa: E402
from sarek.demo import compare, lowerings_for  # noqa: E402
from sarek.loader import load_module  # noqa: E402
from sarek.matrix_pattern import recognize  # noqa: E402
from sarek.matrix_rewrite import rewrite_launch  # noqa: E402

SIZES = ((70, 45, 33), (128, 96, 64), (1, 1, 1), (17, 5, 0))


def main() -> int:
    rows = []
    for path in sorted((ROOT / "examples").glob("gemm_*.py")):
        module = load_module(path)
        for size in SIZES:
            launch = module.make(*size)
            started = time.perf_counter()
            simulated = launch.simulate()
            sim_s = time.perf_counter() - started
            device = run(launch.kernel, dict(launch.args), launch.grid, launch.block)
            verdicts = {name: compare(device[name], simulated[name])[1] for name in simulated}
            same = all(v == "bit-identical" for v in verdicts.values())
            rows.append({"example": path.stem, "kernel": launch.kernel.name, "size": size,
                         "device_equals_simulator": same, "arrays": verdicts,
                         "simulate_seconds": round(sim_s, 4)})
            for lowering in lowerings_for(recognize(launch.kernel).operand_elt):
                rw = rewrite_launch(launch, lowering=lowering).launch
                simulated = rw.simulate(arith="h200")
                device = run(rw.kernel, dict(rw.args), rw.grid, rw.block)
                verdicts = {name: compare(device[name], simulated[name])[1]
                            for name in simulated}
                rows.append({"example": path.stem, "kernel": rw.kernel.name, "size": size,
                             "device_equals_simulator": all(
                                 v == "bit-identical" for v in verdicts.values()),
                             "arrays": verdicts, "arith": "h200"})
    ok = all(r["device_equals_simulator"] for r in rows)
    result = {"device": device_name(), "arch": device_arch(), "all_bit_exact": ok,
              "cases": rows}
    out = ROOT / "bench" / "results" / "conformance_cuda_h200.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{result['device']} ({result['arch']})")
    for r in rows:
        print(f"{r['example']:18} {r['kernel']:34} {'x'.join(map(str, r['size'])):>10}  "
              f"{'bit-identical' if r['device_equals_simulator'] else r['arrays']}")
    print("all bit-exact:", ok)
    return 0 if ok else 1


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
