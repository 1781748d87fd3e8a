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
    TRANSCENDENTAL,
    N,
    compare,
    probes,
)

from backends.spirv.device import device, device_name  # noqa: E402
from backends.spirv.run import run  # noqa: E402
from sarek.errors import SarekError  # noqa: E402
from sarek.ir import ElemType, MathFn  # noqa: E402
from sim import simulate  # noqa: E402


def math_functions(t: ElemType) -> tuple[MathFn, ...]:
    """Every math function the printer prints on ``t`` (no transcendentals on f64)."""
    return tuple(fn for fn in MathFn if t is not ElemType.F64 or fn not in TRANSCENDENTAL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="the JSON report (default "
                        "bench/results/vulkan_arith_h200.json)")
    out_path = parser.parse_args(argv).out or ROOT / "bench" / "results" / "vulkan_arith_h200.json"
    rng = np.random.default_rng(7)
    rows: list[dict[str, object]] = []
    for probe in probes(rng, math_functions):
        want = simulate(probe.kernel, probe.args, grid=1, block=N)
        try:
            got = run(probe.kernel, probe.args, (1,), (N,))
        except SarekError as e:
            rows.append({"kernel": probe.kernel.name, "what": "run", "error": e.reason})
            continue
        rows += [{"kernel": probe.kernel.name, "what": what, "mismatches": bad}
                 for what, bad in compare(probe, got, want)]
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
