"""The device checks recorded in ``bench/results``, read for ``sarek demo``: per check the device,
the number of cases and whether all were bit-exact, and for each case that was not, the
documented reason it may differ. A difference no reason covers is a failure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TRANSCENDENTAL = ("exp", "log", "sin", "cos", "tanh")

FEW_ULPS = ("the transcendental functions differ by a few ulps, as documented (specs/backends.md: "
            "the devices' exp, log, sin, cos and tanh are not correctly rounded)")
FLUSHED = ("subnormal f32 results flushed to zero: the H200's Vulkan driver offers no "
           "DenormPreserve for f32, as documented (specs/backends.md, SPIR-V)")
UNFUSED = ("Vulkan does not promise a fused Fma, and the H200 flushes f32 subnormals, as "
           "documented (specs/backends.md, SPIR-V)")

CHECKS = (("conformance_cuda.json", "examples and rewrites, CUDA vs simulator"),
          ("tile_patterns_h200.json", "ldmatrix/stmatrix vs simulator"),
          ("tensor_core_h200.json", "mma.sync outputs vs the h200 model"),
          ("arith_h200.json", "operations and conversions, CUDA"),
          ("conformance_opencl_nvidia.json", "OpenCL examples and probes"),
          ("conformance_opencl-nv.json", "examples and rewrites, OpenCL inline PTX vs simulator"),
          ("conformance_opencl.json", "examples and rewrites, portable OpenCL vs simulator"),
          ("conformance_vulkan.json", "examples and rewrites, Vulkan vs simulator"),
          ("vulkan_coopmat_h200.json", "Vulkan cooperative matrices vs the h200 model"),
          ("vulkan_arith_h200.json", "operations and conversions, Vulkan"))
"""The recorded checks the demo shows: result file, and what it checked."""


def documented(check: str, kernel: str, what: str) -> str | None:
    """Why operation ``what`` of probe kernel ``kernel`` may differ from the simulator in the
    recorded check ``check`` (a result file's name), or None where it must not."""
    if kernel.startswith("math_") and what in TRANSCENDENTAL:
        return FEW_ULPS
    if check.startswith("vulkan_arith"):
        if (kernel, what) in (("binary_f32", "neg"), ("math_f32", "sqrt")):
            return FLUSHED
        if (kernel, what) == ("math_f32", "fma"):
            return UNFUSED
    return None


@dataclass(frozen=True)
class Record:
    """One recorded check as the demo shows it: ``why`` holds, per documented reason, the
    cases it covers; ``failure`` says what differs without a documented reason."""

    what: str
    device: str
    cases: int
    result: str
    why: tuple[str, ...] = ()
    failure: str | None = None


def recorded_results(examples: Path) -> Path | None:
    """``bench/results`` of the source checkout that holds ``examples``, where the device
    checks are recorded; None outside a checkout (an installed package carries no results)."""
    results = examples.parent / "bench" / "results"
    return results if results.is_dir() else None


def records(results: Path) -> list[Record]:
    """Every check of ``CHECKS`` recorded in ``results`` (never rerun here)."""
    rows = []
    for name, what in CHECKS:
        path = results / name
        if not path.is_file():
            rows.append(Record(what, "-", 0, f"not recorded ({name} missing)"))
            continue
        rows.append(_record(name, what, json.loads(path.read_text())))
    return rows


def _device(data: dict[str, Any]) -> str:
    where = data.get("arch") or data.get("platform", "")
    return str(data.get("opencl_device") or (
        f"{data['device']} ({where})" if where else data["device"]))


def _record(name: str, what: str, data: dict[str, Any]) -> Record:
    device = _device(data)
    if "h200_model_bit_exact" in data or "bit_exact_models" in data:  # outputs of a model probe
        cases = sum(r.get("outputs", 0) for r in data["rows"])
        exact = data.get("h200_model_bit_exact") or "h200" in data.get("bit_exact_models", ())
        return Record(what, device, cases, "all bit-exact" if exact else "MISMATCHES", (),
                      None if exact else f"{name}: outputs differ from the h200 model")
    if "rows" in data:  # the arithmetic probes: one row per operation, with its mismatches
        return _probes(name, what, device, data["rows"])
    cases = len(data["cases"])
    apart = [c for c in data.get("transcendental", ()) if not c["bit_exact"]]
    why = (f"{', '.join(map(_probe, (c['case'] for c in apart)))} (reported apart): "
           f"{FEW_ULPS}",) if apart else ()
    if data["all_bit_exact"]:
        return Record(what, device, cases, "all bit-exact", why)
    failed = sum(not _passed(c) for c in data["cases"])
    return Record(what, device, cases, f"{cases - failed} of {cases} bit-exact", why,
                  f"{name}: {failed} cases differ from the simulator")


def _probe(case: str) -> str:
    """``exp (f32)`` for the probe case ``math_f32 exp``."""
    kernel, _, what = case.partition(" ")
    return f"{what} ({kernel.split('_')[-1]})"


def _passed(case: dict[str, Any]) -> bool:
    if "bit_exact" in case:
        return bool(case["bit_exact"])
    return not case.get("error") and not case.get("violations") and all(
        v == "bit-identical" for v in case.get("arrays", {}).values())


def _probes(name: str, what: str, device: str, rows: list[dict[str, Any]]) -> Record:
    reasons: dict[str, list[str]] = {}
    undocumented = []
    for r in rows:
        if r["mismatches"]:
            reason = documented(name, r["kernel"], r["what"])
            label = _probe(f"{r['kernel']} {r['what']}")
            if reason is None:
                undocumented.append(label)
            else:
                reasons.setdefault(reason, []).append(label)
    differ = sum(len(v) for v in reasons.values()) + len(undocumented)
    result = "all bit-exact" if not differ else f"{len(rows) - differ} of {len(rows)} bit-exact"
    why = tuple(f"{', '.join(labels)}: {reason}" for reason, labels in reasons.items())
    failure = (f"{name}: {', '.join(undocumented)} differ from the simulator, which no "
               "documented reason covers") if undocumented else None
    return Record(what, device, len(rows), result, why, failure)
