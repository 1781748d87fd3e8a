"""The H200's tensor cores against the ``h200`` model on over a million hard cases per type.

Each output of ``mma.sync.m16n8k16`` (f16 or bf16 operands, f32 accumulator) is one fused
dot-add of 16 products and an addend; this check draws 1,081,344 of them per operand type from
the adversarial distributions (``adversarial_cases``: exponent spread, exact cancellation,
overflow, subnormals, signed zeros, infinities and NaN, a dominating addend, the cases where
MMA-Sim's Hopper model and ours disagreed, plain random), runs them through the one-fragment
probe (``mma_probe``, one launch per type), and compares every output bit for bit with the
``h200`` model on whole batches (``sim.tensor_core.mul_add``) and, on the first ``SIM_TILES``
tiles of each distribution, with the full lane-by-lane path (``sarek.simulate(...,
target="cuda", arith="h200")``).

Outputs agree when their bits are equal: the model gives the device's canonical NaN and +0 for
a zero result, so NaN payloads and zero signs count (the device's NaN patterns are tallied in
the record). Records ``tensor_core_adversarial_h200`` with every mismatching case in full.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import needs
import numpy as np
import pytest
from adversarial_cases import DISTRIBUTIONS, SEED, Inputs, agree, digest, draw
from mma_probe import OPERANDS, WARP, N, arguments, probe_kernel
from records import record

import sarek
from sim import tensor_core

TILES = 384  # per distribution: 11 distributions x 384 tiles x 256 outputs = 1,081,344 a type
SIM_TILES = 8  # tiles per distribution also run lane by lane through sarek.simulate
MAX_CASES = 2000  # mismatching outputs recorded in full (all are counted)
Runner = Callable[[str, np.ndarray, np.ndarray, np.ndarray], np.ndarray]
"""``d`` of the probe for operand type ("f16" or "bf16") and ``a``, ``b``, ``c``."""


def simulated(operand: str, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``d`` of the probe kernel run lane by lane on the lowered CUDA kernel by the simulator
    (``h200`` model), shaped like ``c``."""
    elem, dt = OPERANDS[operand]
    out = sarek.simulate(probe_kernel(operand, elem), arguments(a, b, c, dt), grid=c.shape[0],
                         block=WARP, target="cuda", arith="h200")
    return out["d"].reshape(c.shape)


def on_device(operand: str, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``d`` of the probe kernel on device 0 (``backends.cuda.run``), shaped like ``c``."""
    from backends.cuda.run import device_arch, run

    elem, dt = OPERANDS[operand]
    out = run(probe_kernel(operand, elem), arguments(a, b, c, dt), (c.shape[0], 1, 1),
              (WARP, 1, 1), device_arch())
    return out["d"].reshape(c.shape)


def _case(a: np.ndarray, b: np.ndarray, c: np.ndarray, got: np.ndarray, want: np.ndarray,
          index: tuple[int, int, int]) -> dict[str, Any]:
    """One output's inputs (as bits and values) and both results."""
    t, m, n = index
    uint = np.uint16 if a.dtype.itemsize == 2 else np.uint32
    row, col = a[t, m, :], b[t, :, n]

    def bits(x: np.ndarray, u: type) -> list[str]:
        return [f"{int(v):#0{2 + 2 * np.dtype(u).itemsize}x}" for v in x.view(u)]

    return {"tile": t, "row": m, "col": n,
            "a_row_bits": bits(row, uint), "b_col_bits": bits(col, uint),
            "c_bits": bits(c[t, m, n: n + 1], np.uint32)[0],
            "a_row": [float(v) for v in row.astype(np.float64)],
            "b_col": [float(v) for v in col.astype(np.float64)],
            "c": float(c[t, m, n]),
            "device_bits": bits(got[t, m, n: n + 1], np.uint32)[0],
            "model_bits": bits(want[t, m, n: n + 1], np.uint32)[0],
            "device": float(got[t, m, n]), "model": float(want[t, m, n])}


def measure(runner: Runner, device: str, tiles: int, sim_tiles: int = SIM_TILES
            ) -> dict[str, Any]:
    """Runs every distribution's inputs through ``runner`` (one call per operand type) and
    compares the outputs with the ``h200`` model: the report the check records."""
    rows: list[dict[str, Any]] = []
    cases: list[dict[str, Any]] = []
    nan_payloads: dict[str, int] = {}
    inputs: dict[str, dict[str, str]] = {}
    outputs: dict[str, str] = {}
    total_bad = 0
    for operand in OPERANDS:
        drawn: list[Inputs] = [draw(SEED, operand, name, tiles) for name in DISTRIBUTIONS]
        a_all, b_all, c_all = (np.concatenate(part) for part in zip(*drawn, strict=True))
        with np.errstate(all="ignore"):
            d_all = runner(operand, a_all, b_all, c_all)
        outputs[operand] = digest(d_all.view(np.uint32))
        inputs[operand] = {name: digest(*x) for name, x in zip(DISTRIBUTIONS, drawn,
                                                               strict=True)}
        for i, (name, (a, b, c)) in enumerate(zip(DISTRIBUTIONS, drawn, strict=True)):
            got = d_all[i * tiles:(i + 1) * tiles]
            full = min(sim_tiles, tiles)
            with np.errstate(all="ignore"):  # NaN and infinities are inputs here
                want = tensor_core.mul_add(a, b, c)
                lanes = simulated(operand, a[:full], b[:full], c[:full])
            bad = np.argwhere(~agree(got, want))
            for bits in got[np.isnan(got)].view(np.uint32).tolist():
                key = f"{bits:#010x}"
                nan_payloads[key] = nan_payloads.get(key, 0) + 1
            for index in bad[: max(0, MAX_CASES - len(cases))]:
                t, m, n = (int(v) for v in index)
                cases.append({"operands": operand, "distribution": name,
                              **_case(a, b, c, got, want, (t, m, n))})
            total_bad += len(bad)
            rows.append({"operands": operand, "distribution": name, "outputs": int(got.size),
                         "mismatches": len(bad), "nan_outputs": int(np.isnan(got).sum()),
                         "negative_zeros": int(np.count_nonzero(
                             got.view(np.uint32) == 0x80000000)),
                         "infinite_outputs": int(np.isinf(got).sum()),
                         "lane_by_lane_outputs": int(want[:full].size),
                         "lane_by_lane_mismatches": int(np.count_nonzero(
                             ~agree(lanes, want[:full])))})
    return {
        "device": device, "instruction": "mma.sync m16n8k16 f32 f16/bf16",
        "seed": SEED, "tiles_per_distribution": tiles,
        "outputs_per_type": {op: sum(r["outputs"] for r in rows if r["operands"] == op)
                             for op in OPERANDS},
        "agreement": "equal bits (NaN payloads and zero signs included)",
        "device_outputs_sha256": outputs, "inputs_sha256": inputs,
        "numpy": np.__version__, "ml_dtypes": ml_dtypes.__version__,
        "h200_model_matches": total_bad == 0 and all(r["lane_by_lane_mismatches"] == 0
                                                     for r in rows),
        "mismatches": total_bad, "nan_payloads": nan_payloads,
        "rows": rows, "cases": cases, "cases_left_out": total_bad - len(cases)}


@pytest.fixture(scope="module")
def measured() -> dict[str, Any]:
    from backends.cuda.run import device_name

    report = measure(on_device, device_name(), TILES)
    record("tensor_core_adversarial_h200", report)
    return report


def test_every_distribution_is_drawn_reproducibly_from_the_seed() -> None:
    for name in DISTRIBUTIONS:
        first, again = (draw(7, "bf16", name, 2) for _ in range(2))
        assert digest(*first) == digest(*again), name
        assert digest(*first) != digest(*draw(8, "bf16", name, 2)), name


def test_agreement_is_equal_bits_nan_payloads_and_zero_signs_included() -> None:
    got = np.array([0x7FFFFFFF, 0x7FFFFFFF, 0x80000000, 0x3F800000], np.uint32).view(np.float32)
    want = np.array([0x7FFFFFFF, 0xFFC00000, 0x00000000, 0x3F800000], np.uint32).view(np.float32)
    assert agree(got, want).tolist() == [True, False, False, True]


def test_the_lane_by_lane_simulator_gives_the_models_bits_in_the_devices_place() -> None:
    report = measure(simulated, "simulator", 2)
    assert report["mismatches"] == 0 and report["h200_model_matches"]


def test_a_planted_mismatch_is_counted_and_recorded_in_full() -> None:
    def planted(operand: str, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        d = simulated(operand, a, b, c)
        if operand == "f16":  # plain random, tile 0, row 3, column 5: one bit off
            d.view(np.uint32)[0, 3, 5] ^= 1
        return d

    report = measure(planted, "simulator, one bit planted", 1)
    assert report["mismatches"] == 1 and not report["h200_model_matches"]
    (case,) = report["cases"]
    assert (case["operands"], case["distribution"]) == ("f16", "plain random")
    assert (case["tile"], case["row"], case["col"]) == (0, 3, 5)
    assert int(case["device_bits"], 16) ^ int(case["model_bits"], 16) == 1
    assert len(case["a_row_bits"]) == len(case["b_col_bits"]) == N


@pytest.mark.device
@needs.cuda
def test_every_output_on_adversarial_inputs_is_the_h200_models(measured: dict[str, Any]
                                                                ) -> None:
    differ = [(r["operands"], r["distribution"], r["mismatches"])
              for r in measured["rows"] if r["mismatches"]]
    assert not differ, f"outputs that differ from the h200 model: {differ}; the first cases " \
        f"{measured['cases'][:3]}"


@pytest.mark.device
@needs.cuda
def test_the_lane_by_lane_simulator_gives_the_models_bits_on_the_same_inputs(
        measured: dict[str, Any]) -> None:
    differ = [(r["operands"], r["distribution"], r["lane_by_lane_mismatches"])
              for r in measured["rows"] if r["lane_by_lane_mismatches"]]
    assert not differ
