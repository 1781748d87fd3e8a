"""How a Vulkan device's cooperative-matrix multiply-add rounds, against the simulator's models.

The probe is the fragment kernel of ``mma_probe`` printed as SPIR-V by ``sarek.emit(kernel,
"spirv")``: one ``OpCooperativeMatrixMulAddKHR`` of a 16x16x16 configuration per subgroup, so
every output is one cooperative-matrix multiply-add's. It runs through Vulkan
(``backends.spirv.run``) on 400 tiles of each of the five input distributions, f16 and bf16
operands, and each output is compared bit for bit with the simulator running the same kernel
under ``h200`` (which must give the device's bits), ``sequential`` and ``exact``, and with a
candidate decomposition that is no model of the simulator (the 16 products as two chained
8-deep fused dot-adds, as an m16n8k8 pair would give). The device's features, its subgroup
sizes and its cooperative-matrix list (against the recorded one) are recorded too. Records
``vulkan_coopmat_h200``.
"""

from __future__ import annotations

from typing import Any

import needs
import numpy as np
import pytest
from mma_probe import MODELS, OPERANDS, WARP, arguments, distributions, mismatches, probe_kernel
from records import record

import sarek
from sarek.device_support import recorded_h200_vulkan
from sim import tensor_core

TILES = 400
CHAINED = "two chained 8-deep fused dot-adds"


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


@pytest.fixture(scope="module")
def measured() -> list[dict[str, Any]]:
    from backends.spirv.run import run

    facts = device_facts()
    rng = np.random.default_rng(2027)
    rows: list[dict[str, Any]] = []
    for name, (elem, dt) in OPERANDS.items():
        kernel = probe_kernel(name, elem)
        for label, draw in distributions().items():
            args = arguments(*draw(rng, dt, TILES), dt)
            simulated = {m: sarek.simulate(kernel, args, grid=TILES, block=WARP,
                                           target="spirv", arith=m)["d"] for m in MODELS}
            with np.errstate(all="ignore"):
                simulated[CHAINED] = chained_halves(
                    args["a"].reshape(TILES, 16, 16), args["b"].reshape(TILES, 16, 16),
                    args["c"].reshape(TILES, 16, 16)).ravel()
            try:
                got = run(kernel, args, (TILES, 1, 1), (WARP, 1, 1))["d"]
            except sarek.SarekError as e:
                rows.append({"operands": name, "distribution": label, "error": e.reason})
                continue
            rows.append({"operands": name, "distribution": label, "outputs": int(got.size),
                         "mismatches": {m: mismatches(got, want)
                                        for m, want in simulated.items()}})
    exact_models = [m for m in [*MODELS, CHAINED]
                    if rows and all("mismatches" in r and r["mismatches"][m] == 0
                                    for r in rows)]
    record("vulkan_coopmat_h200", {
        **facts, "instruction": "OpCooperativeMatrixMulAddKHR 16x16x16 -> f32",
        "bit_exact_models": exact_models, "rows": rows})
    return rows


def test_the_probe_is_one_cooperative_matrix_multiply_add_per_subgroup() -> None:
    for name, (elem, _) in OPERANDS.items():
        text = sarek.emit(probe_kernel(name, elem), "spirv")
        assert text.count("OpCooperativeMatrixMulAddKHR") == 1, name


@pytest.mark.device
@needs.vulkan_matrices
def test_every_cooperative_matrix_output_is_the_h200_models(measured: list[dict[str, Any]]
                                                            ) -> None:
    errors = [(r["operands"], r["distribution"], r["error"]) for r in measured if "error" in r]
    assert not errors
    differ = [(r["operands"], r["distribution"], r["mismatches"]["h200"]) for r in measured
              if r["mismatches"]["h200"]]
    assert not differ, f"outputs that differ from the h200 model: {differ}"
