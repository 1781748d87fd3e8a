"""How the H200's Vulkan cooperative-matrix multiply-add rounds, against the simulator's models.

The probe is the fragment kernel of ``bench/tensor_core_h200.py`` (per subgroup of 32: a 16x16
A, a 16x16 B and a 16x16 f32 accumulator loaded from global memory, one multiply-add, D
stored), printed as SPIR-V by ``sarek.emit(kernel, "spirv")``: one
``OpCooperativeMatrixMulAddKHR`` of a 16x16x16 configuration per subgroup, so every output is
one cooperative-matrix multiply-add's. It runs through Vulkan (``backends.spirv.run``) on the
same five input distributions (normal, wide exponents, tiny products with a large addend,
cancellation, subnormal operands), f16 and bf16 operands, and each output is compared bit for
bit with the simulator running the same kernel under ``h200``, ``sequential`` and ``exact``,
and with two candidate decompositions that are not models of the simulator (the 16 products as
two chained 8-deep fused dot-adds, as an m16n8k8 pair would give). The device's features, its
subgroup sizes and its cooperative-matrix list (against the recorded one) are recorded too.

Writes bench/results/vulkan_coopmat_h200.json. ``--dry-run`` prints the SPIR-V and runs the
simulator side on a few tiles, with no device and no JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tensor_core_h200 import (  # noqa: E402
    DRY_TILES,
    OPERANDS,
    TILES,
    WARP,
    distributions,
    mismatches,
    probe_kernel,
)

import sarek  # noqa: E402
from sarek.device_support import recorded_h200_vulkan  # noqa: E402
from sim import tensor_core  # noqa: E402

MODELS = ("h200", "sequential", "exact")


def chained_halves(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The candidate where each 16-deep product is two 8-deep fused dot-adds in k order."""
    first = tensor_core.mul_add(a[:, :, :8], b[:, :8, :], c)
    return tensor_core.mul_add(a[:, :, 8:], b[:, 8:, :], first)


def device_facts() -> dict[str, Any]:
    from backends.spirv.device import device

    d = device()
    recorded = recorded_h200_vulkan().configs or frozenset()
    live = d.support.configs or frozenset()
    return {"device": d.name, "subgroup_sizes": list(d.subgroup_sizes),
            "features": d.features, "configs": sorted(str(c) for c in live),
            "configs_equal_recorded": live == recorded,
            "only_live": sorted(str(c) for c in live - recorded),
            "only_recorded": sorted(str(c) for c in recorded - live)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="simulator side only, no JSON")
    dry = bool(parser.parse_args(argv).dry_run)
    tiles = DRY_TILES if dry else TILES
    facts: dict[str, Any] = {}
    if not dry:
        from backends.spirv.run import run

        facts = device_facts()
        print(json.dumps({k: v for k, v in facts.items() if k != "features"}, indent=1))
    rng = np.random.default_rng(2027)
    rows: list[dict[str, Any]] = []
    for name, (elem, dt) in OPERANDS.items():
        kernel = probe_kernel(name, elem)
        text = sarek.emit(kernel, "spirv")
        print(f"{kernel.name}: {len(text.splitlines())} lines of SPIR-V, "
              f"{text.count('OpCooperativeMatrixMulAddKHR')} cooperative-matrix multiply-add")
        if dry:
            print(text)
        for label, draw in distributions().items():
            a, b, c = draw(rng, dt, tiles)
            args = {"a": a.astype(dt).ravel(), "b": b.astype(dt).ravel(),
                    "c": c.astype(np.float32).ravel(), "d": np.zeros(c.size, np.float32)}
            simulated = {m: sarek.simulate(kernel, args, grid=tiles, block=WARP,
                                           target="spirv", arith=m)["d"] for m in MODELS}
            with np.errstate(all="ignore"):
                simulated["two chained 8-deep fused dot-adds"] = chained_halves(
                    args["a"].reshape(tiles, 16, 16), args["b"].reshape(tiles, 16, 16),
                    args["c"].reshape(tiles, 16, 16)).ravel()
            try:
                got = simulated["h200"] if dry else run(kernel, args, (tiles, 1, 1),
                                                        (WARP, 1, 1))["d"]
            except sarek.SarekError as e:
                rows.append({"operands": name, "distribution": label, "error": e.reason})
                print(f"{name:5} {label:24} error: {e.reason}")
                continue
            counts = {m: mismatches(got, want) for m, want in simulated.items()}
            rows.append({"operands": name, "distribution": label, "outputs": int(got.size),
                         "mismatches": counts})
            print(f"{name:5} {label:24} {got.size:>7} outputs  mismatches: "
                  + "  ".join(f"{m} {n}" for m, n in counts.items()))
    if dry:
        print(f"dry run: the simulator side on {tiles} tiles; no device ran")
        return 0
    exact_models = [m for m in [*MODELS, "two chained 8-deep fused dot-adds"]
                    if rows and all("mismatches" in r and r["mismatches"][m] == 0
                                    for r in rows)]
    result = {**facts, "instruction": "OpCooperativeMatrixMulAddKHR 16x16x16 -> f32",
              "bit_exact_models": exact_models, "rows": rows}
    path = ROOT / "bench" / "results" / "vulkan_coopmat_h200.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print("models bit-exact on every output:", exact_models or "none")
    return 0 if "h200" in exact_models else 1


if __name__ == "__main__":
    sys.exit(main())
