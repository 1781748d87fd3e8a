"""Special values on a device: infinities, NaN, zeros, subnormals and operands near f32's largest
finite value through every float lowering, on every device target present, against the
simulator running the same printed kernel and against the original kernel on the same device.

For each target (cuda, opencl-nv, vulkan; those without a device are listed with the reason)
and each float lowering, ``examples/gemm_f32.py`` at 70x45x33 runs on inputs with special
values written over random ones. Two checks per case:

* the device's C equals the simulator's (target's lowering, its arithmetic model) bit for bit,
  any NaN matching any NaN (a NaN's payload is the arithmetic's);
* where the lowering promises the original's special values (``Bf16x3_operands``), C has the
  original's infinities (with their signs) and NaNs exactly where the original kernel, run on
  the same device, has them; for F16 and Bf16 the count of positions where the two differ in
  kind is recorded (their conversion may change an operand's kind: specs 3.1).

Writes bench/results/special_values_h200.json; exits non-zero on any failed check.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Any

import numpy as np

from backends import registry
from backends.pipeline import rewrite_for
from bench.harness import ROOT, write
from sarek.errors import SarekError
from sarek.launch import Launch
from sarek.loader import load_module
from sarek.matrix_scheme import Lowering

SIZE = (70, 45, 33)
F32_MAX = float(np.finfo(np.float32).max)
LOWERINGS = (Lowering.BF16X3_OPERANDS, Lowering.BF16_OPERANDS, Lowering.F16_OPERANDS)


def inputs(base: Launch) -> dict[str, Launch]:
    """Named input sets: special values written over the example's random operands."""
    _, n, k = SIZE

    def placed(a_at: dict[int, float], b_at: dict[int, float]) -> Launch:
        a, b = base.args["a"].copy(), base.args["b"].copy()
        for i, v in a_at.items():
            a[i] = v
        for i, v in b_at.items():
            b[i] = v
        return replace(base, args={**base.args, "a": a, "b": b})

    return {
        "inf in A": placed({3 * k + 5: np.inf, 40 * k: -np.inf}, {}),
        "nan in B": placed({}, {7 * n + 2: np.nan}),
        "inf times zero": placed({10 * k + 4: np.inf}, {4 * n + j: 0.0 for j in range(n)}),
        "inf - inf": placed({20 * k + 1: np.inf, 20 * k + 2: -np.inf}, {}),
        "near f32 max": placed({5 * k + j: F32_MAX * (1 - 2.0**-20) for j in range(k)}, {}),
        "overflowing products": placed({6 * k + j: 1e30 for j in range(k)},
                                       {j * n + 9: 1e30 for j in range(k)}),
        "subnormals": placed({7 * k + j: 1e-40 for j in range(k)},
                             {j * n + 3: 3e-39 for j in range(k)}),
        "signed zeros": placed({8 * k + j: -0.0 for j in range(k)}, {}),
    }


def kind(x: np.ndarray) -> np.ndarray:
    """0 finite, 1 +inf, 2 -inf, 3 NaN."""
    return np.where(np.isnan(x), 3, np.where(x == np.inf, 1, np.where(x == -np.inf, 2, 0)))


def same_bits(got: np.ndarray, want: np.ndarray) -> int:
    """Positions that differ, any NaN matching any NaN."""
    equal = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    return int((~equal).sum())


def main() -> int:
    base = load_module(ROOT / "examples" / "gemm_f32.py").make(*SIZE, seed=4)
    rows: list[dict[str, Any]] = []
    absent: dict[str, str] = {}
    ok = True
    for name in ("cuda", "opencl-nv", "vulkan"):
        target = registry.target(name)
        reason = target.device_reason()
        if reason is not None or target.run is None:
            absent[name] = reason or "no runner"
            continue
        for what, run in inputs(base).items():
            try:
                original = target.run(run.kernel, run.args, run.grid, run.block)["c"]
            except SarekError as e:
                ok = False
                rows.append({"target": name, "inputs": what, "lowering": None,
                             "error": e.reason, "passed": False})
                print(f"{name:9} {what:22} original: {e.reason}")
                continue
            for lowering in LOWERINGS:
                # the neutral rewrite as the target compiles it: its runner lowers it
                done = rewrite_for(run, lowering=lowering, target=name).launch
                got = target.run(done.kernel, done.args, done.grid, done.block)["c"]
                sim = done.simulate(target=name)["c"]
                against_sim = same_bits(got, sim)
                kinds_differ = int((kind(got) != kind(original)).sum())
                promised = lowering is Lowering.BF16X3_OPERANDS
                passed = against_sim == 0 and (kinds_differ == 0 or not promised)
                ok &= passed
                rows.append({"target": name, "inputs": what, "lowering": lowering.value,
                             "differ_from_simulator": against_sim,
                             "special_kind_differs_from_original": kinds_differ,
                             "original_nonfinite": int((kind(original) != 0).sum()),
                             "passed": passed})
                print(f"{name:9} {what:22} {lowering.value:16} sim-diff {against_sim:4} "
                      f"kind-diff {kinds_differ:4} nonfinite {rows[-1]['original_nonfinite']:4}"
                      f" {'ok' if passed else 'FAIL'}")
    out = {"size": SIZE, "absent": absent, "all_passed": ok, "rows": rows}
    write("special_values_h200", out)
    print(f"{len(rows)} cases; all passed: {ok}; absent: {absent or 'none'}")
    return 0 if ok else 1


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
