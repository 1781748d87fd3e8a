"""Every GEMM example and every arithmetic probe kernel printed as OpenCL C and run on a real
OpenCL device (by default NVIDIA's OpenCL on the GPU machine), against the simulator bit for
bit. Writes bench/results/conformance_opencl_<platform>.json. Usage:
``python bench/conformance_opencl.py [PLATFORM-NAME-PART]``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

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

from backends.opencl.run import find_device, run  # noqa: E402
from sarek.demo import compare  # noqa: E402
from sarek.dsl import numpy_dtype  # noqa: E402
from sarek.ir import ElemType, MathFn  # noqa: E402
from sarek.loader import load_module  # noqa: E402
from sim import simulate  # noqa: E402


def main(platform: str) -> int:
    device = find_device(platform)
    rows = []
    for path in sorted((ROOT / "examples").glob("gemm_*.py")):
        for size in ((70, 45, 33), (128, 96, 64), (1, 1, 1), (17, 5, 0)):
            launch = load_module(path).make(*size)
            want = launch.simulate()
            got = run(launch.kernel, dict(launch.args), launch.grid, launch.block, platform)
            same = all(compare(got[k], want[k])[0] for k in want)
            rows.append({"case": f"{path.stem} {'x'.join(map(str, size))}", "bit_exact": same})
    rng = np.random.default_rng(21)
    probes = []
    for t in INTS + FLOATS:
        kernel, names = binary_kernel(t)
        a, b = edge_values(t, rng), np.roll(edge_values(t, rng), 5)
        if t.is_int:
            b = np.where(b == 0, np.ones_like(b), b)
        probes.append((kernel, {"a": a, "b": b, "out": np.zeros((len(names) - 6) * N, a.dtype),
                                "flags": np.zeros(6 * N, np.bool_)}))
    for src in [*INTS, *FLOATS, ElemType.F16, ElemType.BF16]:
        kernel = cast_kernel(src)
        values = (edge_values(src, rng) if src not in (ElemType.F16, ElemType.BF16)
                  else edge_values(ElemType.F32, rng).astype(numpy_dtype(src)))
        probes.append((kernel, {"a": values, **{p.name: np.zeros(N, numpy_dtype(p.elem))
                                                for p in kernel.params[1:]}}))
    transcendental = []
    for t in FLOATS:
        kernel = math_kernel(t)
        vals = [edge_values(t, rng) for _ in range(3)]
        args = {"a": vals[0], "b": np.roll(vals[1], 3), "c": np.roll(vals[2], 7),
                "out": np.zeros(len(MathFn) * N, vals[0].dtype)}
        want = simulate(kernel, args, grid=1, block=N)["out"]
        got = run(kernel, args, (1,), (N,), platform)["out"]
        for k, fn in enumerate(MathFn):
            bad = mismatches(got[k * N:(k + 1) * N], want[k * N:(k + 1) * N])
            target = transcendental if fn in TRANSCENDENTAL else rows
            target.append({"case": f"{kernel.name} {fn.value}", "bit_exact": bad == 0,
                           "mismatches": bad})
    for kernel, args in probes:
        want = simulate(kernel, args, grid=1, block=N)
        got = run(kernel, args, (1,), (N,), platform)
        for name in want:
            if name != "a" and name != "b":
                bad = mismatches(got[name], want[name])
                rows.append({"case": f"{kernel.name} {name}", "bit_exact": bad == 0,
                             "mismatches": bad})
    ok = all(r["bit_exact"] for r in rows)
    for r in rows + transcendental:
        if not r["bit_exact"]:
            print(f"{r['case']:30} {r.get('mismatches', '')} differ")
    result = {"device": device.name, "platform": device.platform.name, "all_bit_exact": ok,
              "cases": rows, "transcendental": transcendental}
    tag = "".join(c for c in device.platform.name.split()[0].lower() if c.isalnum())
    out = ROOT / "bench" / "results" / f"conformance_opencl_{tag}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{device.platform.name} / {device.name}: {len(rows)} cases, all bit-exact: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "NVIDIA"))
