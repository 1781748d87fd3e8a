"""The CUDA printer's arithmetic on a real GPU against the simulator, bit for bit.

For every element type, one kernel applies every binary and unary operation of the IR to pairs
of edge-case and random inputs (zeros of both signs, infinities, NaN, subnormals, the limits of
the integer types, halfway cases), one kernel per source type converts to every element type,
and one kernel per float type applies the math functions. Each output is compared bit for bit
with the simulator (NaNs by value class: any NaN matches any NaN). Transcendental functions
(exp, log, sin, cos, tanh) are reported apart: the simulator rounds the float64 result, devices
may differ by a few units in the last place. Writes bench/results/arith_h200.json.
"""

from __future__ import annotations

import sys

import numpy as np

from bench.harness import ROOT, write

# a device check drawing on the test suite's cases (tests/), as pytest does
sys.path.insert(0, str(ROOT / "tests"))

from arith_cases import TRANSCENDENTAL, N, compare, probes  # type: ignore[import-not-found]

from backends.cuda.run import device_arch, device_name, run
from sim import simulate


def main() -> int:
    rng = np.random.default_rng(7)
    rows = []
    for probe in probes(rng):
        want = simulate(probe.kernel, probe.args, grid=1, block=N)
        got = run(probe.kernel, probe.args, (1,), (N,))
        rows += [{"kernel": probe.kernel.name, "what": what, "mismatches": bad}
                 for what, bad in compare(probe, got, want)]
    exact_rows = [r for r in rows if r["what"] not in {f.value for f in TRANSCENDENTAL}]
    ok = all(r["mismatches"] == 0 for r in exact_rows)
    for r in rows:
        if r["mismatches"] or r["what"] in {f.value for f in TRANSCENDENTAL}:
            print(f"{r['kernel']:14} {r['what']:10} {r['mismatches']} of {N} differ")
    result = {"device": device_name(), "arch": device_arch(), "inputs_per_case": N,
              "all_exact_operations_bit_exact": ok, "rows": rows}
    write("arith_h200", result)
    print(f"{len(exact_rows)} exact operations/conversions checked; all bit-exact: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
