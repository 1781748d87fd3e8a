"""``sarek conformance --target vulkan`` with the device gate's refusals in the report.

Runs the conformance matrix of ``backends.conformance`` for the ``vulkan`` target (every
example at every size, the original and each rewrite the gate permits on this device, run
through Vulkan and compared bit for bit with the simulator running the same lowered kernel,
canaries included) and adds to the report every (lowering, subgroup, fragment) the target
refuses, with the reason, and the Vulkan device it ran on. ``--arith MODEL`` compares the
rewrites under another arithmetic model than the target's default (to check a probe's
conclusion before making it the default). Writes bench/results/conformance_vulkan.json (or
``--report``); exit status 0 when every case is bit-identical with no canary violation.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backends import conformance, registry  # noqa: E402
from backends.target import Target  # noqa: E402
from sarek.ir import ElemType  # noqa: E402
from sarek.matrix_scheme import (  # noqa: E402
    SUPPORTED_FRAGMENT,
    SUPPORTED_SUBGROUP,
    lowerings_taking,
)


def device_defaults() -> list[str]:
    """The float-controls properties the device lacks: modules run with its defaults there
    (``backends.spirv.device.device_defaults``)."""
    from backends.spirv.device import device

    return sorted(name for name, ok in device().features.items()
                  if name.startswith(("shaderDenorm", "shaderSignedZero", "shaderRounding"))
                  and not ok)


def refusals(target: Target) -> list[dict[str, object]]:
    """Every (lowering, subgroup, fragment) of the examples' lowerings the target refuses."""
    lowerings = dict.fromkeys(low for t in (ElemType.I32, ElemType.F16, ElemType.F32)
                              for low in lowerings_taking(t))
    out: list[dict[str, object]] = []
    for low in lowerings:
        for sg in SUPPORTED_SUBGROUP:
            for frag in SUPPORTED_FRAGMENT:
                reason = target.refuses(low, sg, frag)
                if reason is not None:
                    out.append({"lowering": low.value, "subgroup": sg, "frag": frag,
                                "reason": reason})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the ragged size alone")
    parser.add_argument("--arith", help="the simulator's model for the rewrites")
    parser.add_argument("--example", action="append", default=[], help="only these examples")
    parser.add_argument("--report", type=Path,
                        default=ROOT / "bench" / "results" / "conformance_vulkan.json")
    args = parser.parse_args(argv)
    target = registry.target("vulkan")
    reason = target.device_reason()
    if reason is not None:
        print(f"no Vulkan device: {reason}")
        return 3
    if args.arith:
        target = replace(target, arith=args.arith)
    from backends.spirv.device import device_name

    cases = conformance.matrix(target, ROOT / "examples", quick=args.quick,
                               only=tuple(args.example))
    started = time.perf_counter()
    outcomes: list[conformance.Outcome] = []

    def write(complete: bool) -> dict[str, Any]:
        result = conformance.report("vulkan", device_name(), target.arith, args.quick,
                                    outcomes)
        result["complete"] = complete  # False while running: a stopped run leaves its part
        result["refused"] = refusals(target)
        result["support"] = {"device": target.support().device, "note": target.support().note}
        result["float_modes_left_to_the_device"] = device_defaults()
        args.report.write_text(json.dumps(result, indent=2) + "\n")
        return result

    with np.errstate(all="ignore"):
        for i, case in enumerate(cases):
            outcome = conformance.check(case, target, device=True)
            outcomes.append(outcome)
            if not outcome.ok:
                print(conformance.failure(outcome), flush=True)
            if i % 20 == 19:
                write(False)
    result = write(True)
    t = result["totals"]
    print(f"{result['device']}: {t['passed']} of {t['cases']} cases bit-identical; "
          f"{t['mismatches']} mismatched arrays, {t['canary_violations']} canary violations, "
          f"{t['errors']} errors in {time.perf_counter() - started:.1f} s; "
          f"{len(result['refused'])} configurations refused by the gate; report {args.report}")
    for r in result["refused"]:
        print(f"  refused {r['lowering']} subgroup {r['subgroup']} frag {r['frag']}: "
              f"{r['reason']}")
    return 0 if t["passed"] == t["cases"] else 1


if __name__ == "__main__":
    sys.exit(main())
