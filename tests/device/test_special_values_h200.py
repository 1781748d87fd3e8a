"""Special values on a device: infinities, NaN, zeros, subnormals and operands near f32's largest
finite value through every float lowering, on every device target present, against the
simulator running the same printed kernel and against the original kernel on the same device.

For each target (cuda, opencl-nv, vulkan; each absent one is skipped with the reason) and each
float lowering, ``examples/gemm_f32.py`` at 70x45x33 runs on inputs with special values written
over random ones. Two checks per case:

* the device's C equals the simulator's (the target's lowering, its arithmetic model) bit for
  bit, any NaN matching any NaN (a NaN's payload is the arithmetic's);
* where the lowering promises the original's special values (``Bf16x3_operands``), C has the
  original's infinities (with their signs) and NaNs exactly where the original kernel, run on
  the same device, has them; for F16 and Bf16 the count of positions where the two differ in
  kind is recorded (their conversion may change an operand's kind: specs 3.1).

Records ``special_values_h200`` (every target present, one file).
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from typing import Any

import needs
import numpy as np
import pytest
from conftest import example
from records import record

from backends import registry
from backends.pipeline import rewrite_for
from sarek.errors import SarekError
from sarek.launch import Launch
from sarek.matrix_scheme import Lowering

SIZE = (70, 45, 33)
F32_MAX = float(np.finfo(np.float32).max)
LOWERINGS = (Lowering.BF16X3_OPERANDS, Lowering.BF16_OPERANDS, Lowering.F16_OPERANDS)
TARGETS = ("cuda", "opencl-nv", "vulkan")


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


def differing(got: np.ndarray, want: np.ndarray) -> int:
    """Positions whose bits differ, any NaN matching any NaN."""
    equal = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    return int((~equal).sum())


@cache
def absent(name: str) -> str | None:
    """Why target ``name`` has no device here, or None."""
    target = registry.target(name)
    reason = target.device_reason()
    if reason is None and name == "vulkan":  # every rewrite here multiplies fragments
        reason = needs.VULKAN_MATRICES
    return reason or ("no runner" if target.run is None else None)


def measure(name: str, base: Launch) -> list[dict[str, Any]]:
    """Every input set under every lowering on target ``name``."""
    target = registry.target(name)
    assert target.run is not None
    rows: list[dict[str, Any]] = []
    for what, run in inputs(base).items():
        try:
            original = target.run(run.kernel, run.args, run.grid, run.block)["c"]
        except SarekError as e:
            rows.append({"target": name, "inputs": what, "lowering": None, "error": e.reason,
                         "passed": False})
            continue
        for lowering in LOWERINGS:
            # the neutral rewrite as the target compiles it: its runner lowers it
            done = rewrite_for(run, lowering=lowering, target=name).launch
            got = target.run(done.kernel, done.args, done.grid, done.block)["c"]
            sim = done.simulate(target=name)["c"]
            against_sim = differing(got, sim)
            kinds_differ = int((kind(got) != kind(original)).sum())
            promised = lowering is Lowering.BF16X3_OPERANDS
            rows.append({"target": name, "inputs": what, "lowering": lowering.value,
                         "differ_from_simulator": against_sim,
                         "special_kind_differs_from_original": kinds_differ,
                         "original_nonfinite": int((kind(original) != 0).sum()),
                         "passed": against_sim == 0 and (kinds_differ == 0 or not promised)})
    return rows


@pytest.fixture(scope="module")
def measured() -> dict[str, list[dict[str, Any]]]:
    base = example("gemm_f32").make(*SIZE, seed=4)
    present = [name for name in TARGETS if absent(name) is None]
    with np.errstate(all="ignore"):
        rows = {name: measure(name, base) for name in present}
    every = [r for name in present for r in rows[name]]
    record("special_values_h200", {
        "size": SIZE, "absent": {name: absent(name) for name in TARGETS if absent(name)},
        "all_passed": all(r["passed"] for r in every), "rows": every})
    return rows


PRESENT = [pytest.param(name, marks=pytest.mark.skipif(absent(name) is not None,
                                                      reason=f"{name}: {absent(name)}"))
           for name in TARGETS]


@pytest.mark.device
@pytest.mark.parametrize("target", PRESENT)
def test_every_float_lowering_gives_the_simulators_bits_on_special_values(
        target: str, measured: dict[str, list[dict[str, Any]]]) -> None:
    differ = [(r["inputs"], r["lowering"], r.get("error") or r["differ_from_simulator"])
              for r in measured[target] if "error" in r or r["differ_from_simulator"]]
    assert not differ


@pytest.mark.device
@pytest.mark.parametrize("target", PRESENT)
def test_bf16x3_keeps_the_originals_infinities_and_nans_where_they_are(
        target: str, measured: dict[str, list[dict[str, Any]]]) -> None:
    differ = [(r["inputs"], r["special_kind_differs_from_original"]) for r in measured[target]
              if r["lowering"] == Lowering.BF16X3_OPERANDS.value
              and r["special_kind_differs_from_original"]]
    assert not differ
