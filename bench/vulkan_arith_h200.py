"""The SPIR-V printer's arithmetic through Vulkan against the simulator, bit for bit.

The probes of ``bench/arith_h200.py`` (``tests/arith_cases.py``): per element type one kernel
applying every binary and unary operation to edge-case and random inputs, per source type one
kernel converting to every element type, per float type the math functions. Each kernel is
printed as SPIR-V, assembled and run through Vulkan (``backends.spirv.run``, the first Vulkan
device: the H200 on the GPU machine, lavapipe on a CPU) and each output compared bit for bit
with the simulator (any NaN matches any NaN). Transcendentals are reported apart (devices may
differ by a few ulps); on f64 they are refused by the printer (GLSL.std.450 has them for 16- and
32-bit floats only), so the f64 math kernel holds the exact functions. ``fma`` is reported
too: Vulkan does not promise a fused GLSL ``Fma``. Writes bench/results/vulkan_arith_<device>.json
(``--out`` to name it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from arith_cases import (  # type: ignore[import-not-found]  # noqa: E402
    FLOATS,
    INTS,
    TRANSCENDENTAL,
    N,
    binary_kernel,
    cast_kernel,
    edge_values,
    mismatches,
    tid,
)

from backends.spirv.run import device, device_name, run  # noqa: E402
from sarek import ir  # noqa: E402
from sarek.dsl import numpy_dtype  # noqa: E402
from sarek.errors import SarekError  # noqa: E402
from sarek.ir import ElemType, MathFn  # noqa: E402
from sim import simulate  # noqa: E402


def math_kernel(t: ElemType) -> tuple[ir.Kernel, list[MathFn]]:
    """Every math function the printer prints on ``t`` (no transcendentals on f64)."""
    fns = [fn for fn in MathFn if t is not ElemType.F64 or fn not in TRANSCENDENTAL]
    a, b, c = (ir.Load(array=x, index=tid(), type=t) for x in "abc")
    body = tuple(ir.Store(array="out", index=ir.Binary(
        op=ir.BinOp.ADD, a=ir.Const(value=k * N, type=ElemType.I32), b=tid(),
        type=ElemType.I32), value=ir.Call(fn=fn, args=(a, b, c)[:ir.MATH_ARITY[fn]], type=t))
        for k, fn in enumerate(fns))
    params = (*(ir.ArrayParam(name=x, elem=t, readonly=True) for x in "abc"),
              ir.ArrayParam(name="out", elem=t))
    return ir.Kernel(name=f"math_{t.value}", params=params, body=body), fns


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="the JSON report (default "
                        "bench/results/vulkan_arith_h200.json)")
    out_path = parser.parse_args(argv).out or ROOT / "bench" / "results" / "vulkan_arith_h200.json"
    rng = np.random.default_rng(7)
    rows: list[dict[str, object]] = []

    def check(label: str, kernel: ir.Kernel, args: dict[str, np.ndarray],
              per_op: list[tuple[str, str, int]] | None = None) -> None:
        want = simulate(kernel, args, grid=1, block=N)
        try:
            got = run(kernel, args, (1,), (N,))
        except SarekError as e:
            rows.append({"kernel": label, "what": "run", "error": e.reason})
            return
        for name in want:
            if per_op and name in {x[0] for x in per_op}:
                for array, op, k in per_op:
                    if array == name:
                        bad = mismatches(got[name][k * N:(k + 1) * N],
                                         want[name][k * N:(k + 1) * N])
                        rows.append({"kernel": label, "what": op, "mismatches": bad})
            elif not kernel.param(name).readonly:  # type: ignore[union-attr]
                rows.append({"kernel": label, "what": name,
                             "mismatches": mismatches(got[name], want[name])})

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
        check(kernel.name, kernel, {"a": values, **{p.name: np.zeros(N, numpy_dtype(p.elem))
                                                    for p in kernel.params[1:]}})
    for t in FLOATS:
        kernel, fns = math_kernel(t)
        vals = [edge_values(t, rng) for _ in range(3)]
        check(kernel.name, kernel, {"a": vals[0], "b": np.roll(vals[1], 3),
                                    "c": np.roll(vals[2], 7),
                                    "out": np.zeros(len(fns) * N, vals[0].dtype)},
              [("out", fn.value, k) for k, fn in enumerate(fns)])
    loose = {f.value for f in TRANSCENDENTAL} | {"fma"}
    exact_rows = [r for r in rows if r["what"] not in loose]
    ok = all(r.get("mismatches") == 0 for r in exact_rows)
    for r in rows:
        if r.get("mismatches") or "error" in r or r["what"] in loose:
            print(f"{r['kernel']:14} {r['what']:10} "
                  + (f"{r['mismatches']} of {N} differ" if "error" not in r else
                     f"error: {r['error']}"))
    result = {"device": device_name(), "inputs_per_case": N,
              "float_modes_left_to_the_device": sorted(
                  name for name, ok in device().features.items()
                  if name.startswith(("shaderDenorm", "shaderSignedZero", "shaderRounding"))
                  and not ok),
              "all_exact_operations_bit_exact": ok,
              "not_promised_bit_exact": sorted(loose), "rows": rows}
    out_path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{len(exact_rows)} exact operations/conversions checked on {result['device']}; "
          f"all bit-exact: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
