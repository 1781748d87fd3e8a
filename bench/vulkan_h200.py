"""Every Vulkan check on the GPU machine in one go (device time is scarce): the cooperative-
matrix rounding probe, the arithmetic probes, the conformance matrix and the speed table
(every lowering through Vulkan beside CUDA, ``bench/backends_speed_h200.py``).

Runs ``bench/vulkan_coopmat_h200.py`` first; the models it finds bit-exact pick the arithmetic
model the conformance compares rewrites under (``h200`` unless the probe says otherwise, which
the report records). Float-controls properties the device does not report (denormal
preservation, signed zeros, round to nearest even) are listed and then taken as present for
the other checks (``SAREK_VULKAN_ASSUME``), so that what the device computes is compared bit
for bit rather than refused; each report names what was assumed. Each script runs under its
own time limit; logs and reports go to ``--out`` (default bench/results).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def step(name: str, args: list[str], limit: int, out: Path, env: dict[str, str]) -> int:
    with (out / f"{name}.log").open("w") as log:
        try:
            done = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, stdout=log,
                                  stderr=subprocess.STDOUT, timeout=limit, check=False)
            code = done.returncode
        except subprocess.TimeoutExpired:
            log.write(f"\nstopped after {limit} s\n")
            code = 124
    print(f"{name}: exit {code}", flush=True)
    return code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--skip", action="append", default=[],
                        help="coopmat, arith, conformance or speed")
    opts = parser.parse_args()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    query = ("import json; from backends.spirv.device import device; d = device(); "
             "print(json.dumps({'device': d.name, 'subgroups': d.subgroup_sizes, "
             "'features': d.features}))")
    facts = subprocess.run([sys.executable, "-c", query], cwd=ROOT, env=env, text=True,
                           capture_output=True, timeout=60, check=False)
    print(facts.stdout.strip() or facts.stderr.strip()[-2000:], flush=True)
    if "coopmat" not in opts.skip:
        step("coopmat", ["bench/vulkan_coopmat_h200.py"], 90, opts.out, env)
    model = "h200"
    probe = RESULTS / "vulkan_coopmat_h200.json"
    if probe.is_file():
        exact = [m for m in json.loads(probe.read_text()).get("bit_exact_models", [])
                 if m in ("h200", "sequential", "exact")]
        model = exact[0] if exact else "h200"
    print(f"conformance model: {model}", flush=True)
    if "arith" not in opts.skip:
        step("arith", ["bench/vulkan_arith_h200.py"], 60, opts.out, env)
    if "conformance" not in opts.skip:
        step("conformance", ["bench/vulkan_conformance.py", "--arith", model], 300, opts.out,
             env)
    if "speed" not in opts.skip:
        step("speed", ["bench/backends_speed_h200.py"], 240, opts.out, env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
