"""Every bundled GEMM example on a real GPU against the simulator, bit for bit.

Each example's kernel is printed as CUDA, compiled with NVRTC for the device and run there on
the same inputs the simulator gets; every output word is compared. Writes
bench/results/conformance_cuda_h200.json and prints a table. Needs an NVIDIA GPU.
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
from sarek.demo import compare  # noqa: E402
from sarek.loader import load_module  # noqa: E402

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
    ok = all(r["device_equals_simulator"] for r in rows)
    result = {"device": device_name(), "arch": device_arch(), "all_bit_exact": ok,
              "cases": rows}
    out = ROOT / "bench" / "results" / "conformance_cuda_h200.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{result['device']} ({result['arch']})")
    for r in rows:
        print(f"{r['example']:18} {'x'.join(map(str, r['size'])):>10}  "
              f"{'bit-identical' if r['device_equals_simulator'] else r['arrays']}")
    print("all bit-exact:", ok)
    return 0 if ok else 1


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
