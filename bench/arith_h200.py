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

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "tests"))

from arith_cases import (  # noqa: E402
    FLOATS,
    INTS,
    TRANSCENDENTAL,
    N,
    binary_kernel,
    cast_kernel,
    edge_values,
    math_kernel,
    mismatches,
)

from backends.cuda.run import device_arch, device_name, run  # noqa: E402
from sarek import ir  # noqa: E402
from sarek.dsl import numpy_dtype  # noqa: E402
from sarek.ir import ElemType, MathFn  # noqa: E402
from sim import simulate  # noqa: E402


def main() -> int:
    rng = np.random.default_rng(7)
    rows = []

    def check(label: str, kernel: ir.Kernel, args: dict[str, np.ndarray],
              per_op: list[tuple[str, str, int]] | None = None) -> None:
        want = simulate(kernel, args, grid=1, block=N)
        got = run(kernel, args, (1,), (N,))
        for name in want:
            if per_op and name in {x[0] for x in per_op}:
                for array, op, k in per_op:
                    if array == name:
                        bad = mismatches(got[name][k * N:(k + 1) * N],
                                         want[name][k * N:(k + 1) * N])
                        rows.append({"kernel": label, "what": op, "mismatches": bad})
            elif not kernel.param(name).readonly:  # type: ignore[union-attr]
                rows.append({"kernel": label, "what": name, "mismatches":
                             mismatches(got[name], want[name])})

    for t in INTS + FLOATS:
        kernel, names = binary_kernel(t)
        a, b = edge_values(t, rng), np.roll(edge_values(t, rng), 5)
        if t.is_int:
            b = np.where(b == 0, np.ones_like(b), b)  # the IR leaves x / 0 undefined
        n_arith = len(names) - 6
        per_op = [("out", names[k], k) for k in range(n_arith)]
        per_op += [("flags", names[n_arith + k], k) for k in range(6)]
        check(kernel.name, kernel, {"a": a, "b": b, "out": np.zeros(n_arith * N, a.dtype),
                                    "flags": np.zeros(6 * N, np.bool_)}, per_op)
    for src in [*INTS, *FLOATS, ElemType.F16, ElemType.BF16]:
        kernel = cast_kernel(src)
        values = (edge_values(src, rng) if src not in (ElemType.F16, ElemType.BF16)
                  else edge_values(ElemType.F32, rng).astype(numpy_dtype(src)))
        args = {"a": values, **{p.name: np.zeros(N, numpy_dtype(p.elem))
                                for p in kernel.params[1:]}}
        check(kernel.name, kernel, args)
    for t in FLOATS:
        kernel = math_kernel(t)
        vals = [edge_values(t, rng) for _ in range(3)]
        per_op = [("out", fn.value, k) for k, fn in enumerate(MathFn)]
        check(kernel.name, kernel, {"a": vals[0], "b": np.roll(vals[1], 3),
                                    "c": np.roll(vals[2], 7),
                                    "out": np.zeros(len(MathFn) * N, vals[0].dtype)}, per_op)
    exact_rows = [r for r in rows if r["what"] not in {f.value for f in TRANSCENDENTAL}]
    ok = all(r["mismatches"] == 0 for r in exact_rows)
    for r in rows:
        if r["mismatches"] or r["what"] in {f.value for f in TRANSCENDENTAL}:
            print(f"{r['kernel']:14} {r['what']:10} {r['mismatches']} of {N} differ")
    result = {"device": device_name(), "arch": device_arch(), "inputs_per_case": N,
              "all_exact_operations_bit_exact": ok, "rows": rows}
    (ROOT / "bench" / "results" / "arith_h200.json").write_text(json.dumps(result, indent=2)
                                                                + "\n")
    print(f"{len(exact_rows)} exact operations/conversions checked; all bit-exact: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
