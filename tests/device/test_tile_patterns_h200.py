"""Tile patterns on a GPU against the simulator and the contract, bit for bit.

For the seed's example and for x1/x2/x4 ``ldmatrix`` and ``stmatrix``, with and without
``.trans``, on plain and on interleaved/gapped layouts (a fixed seed), each probe kernel
(``sarek.tile_probe``) is compiled with NVRTC for the device, run, simulated, and every output
word compared; the simulator is compared with the contract written as a direct gather
(``tile_cases``); and ``stmatrix`` then ``ldmatrix`` on the device must give the registers
back. Needs sm_90 (``stmatrix``). Records ``tile_patterns_h200``.
"""

from __future__ import annotations

import time
from typing import Any

import needs
import numpy as np
import pytest
from conftest import EXAMPLES
from records import record
from tile_cases import Case, expected_registers, expected_shared

from sarek.layout import TileLayout, laneid
from sarek.loader import load_module
from sarek.tile_probe import probe_kernel
from sim import simulate

SENTINEL = 4294966519  # what the contract leaves in a register slot ldmatrix does not write


def plain(kind: str, count: int, trans: bool, repeats: int = 1) -> Case:
    shared = TileLayout(shape=(repeats, count, 8, 4), stride=(32 * count, 32, 4, 1))
    regs = TileLayout(shape=(repeats, count, 8, 4),
                      stride=(count, 1, 4 @ laneid, 1 @ laneid))
    op = f"{kind}.sync.aligned.m8n8.x{count}{'.trans' if trans else ''}.shared.b16"
    return Case(op, count, trans, repeats, shared, 32 * count * repeats, regs, count * repeats)


def scattered(kind: str, count: int, trans: bool, rng: np.random.Generator) -> Case:
    """Interleaved matrices, gaps between rows, permuted register slots."""
    repeats = int(rng.integers(1, 4))
    while True:
        rep_s, m_s, r_s = (4 * int(x) for x in rng.integers(1, 40, 3))
        shared = TileLayout(shape=(repeats, count, 8, 4), stride=(rep_s, m_s, r_s, 1))
        starts = shared.offsets()[..., 0].ravel()
        if len(np.unique(starts)) == starts.size:
            break
    while True:
        rep_t, m_t = (int(x) for x in rng.integers(1, 10, 2))
        slots = {a * rep_t + m * m_t for a in range(repeats) for m in range(count)}
        if len(slots) == repeats * count:
            break
    regs = TileLayout(shape=(repeats, count, 8, 4), stride=(rep_t, m_t, 4 @ laneid, 1 @ laneid))
    op = f"{kind}.sync.aligned.m8n8.x{count}{'.trans' if trans else ''}.shared.b16"
    return Case(op, count, trans, repeats, shared, int(starts.max()) + 8, regs, max(slots) + 2)


def differs(a: np.ndarray, b: np.ndarray) -> int:
    return int(np.count_nonzero(a != b))


def check_case(name: str, case: Case, rng: np.random.Generator) -> dict[str, Any]:
    from backends.cuda.run import run

    kernel = probe_kernel(case.opcode, case.shared, case.shared_words, case.registers,
                          case.register_words)
    if case.opcode.startswith("ldmatrix"):
        args = {"src": rng.integers(0, 2**32, case.shared_words, dtype=np.uint32),
                "out": np.zeros(32 * case.register_words, np.uint32)}
        contract = expected_registers(case, args["src"], SENTINEL).ravel()
    else:
        args = {"regs_in": rng.integers(0, 2**32, 32 * case.register_words, dtype=np.uint32),
                "init": rng.integers(0, 2**32, case.shared_words, dtype=np.uint32),
                "out": np.zeros(case.shared_words, np.uint32)}
        contract = expected_shared(case, args["regs_in"].reshape(32, -1), args["init"])
    simulated = simulate(kernel, args, grid=(1, 1, 1), block=(32, 1, 1))["out"]
    device = run(kernel, args, grid=(1, 1, 1), block=(32, 1, 1))["out"]
    return {"name": name, "opcode": case.opcode, "shared": repr(case.shared),
            "registers": repr(case.registers), "instructions_per_warp": case.repeats,
            "device_vs_simulator_mismatches": differs(device, simulated),
            "simulator_vs_contract_mismatches": differs(simulated, contract),
            "words": int(device.size)}


def seed_example() -> dict[str, Any]:
    from backends.cuda.run import run

    module = load_module(EXAMPLES / "ldmatrix_interleaved.py")
    launch = module.make()
    simulated = launch.simulate()["out"]
    device = run(launch.kernel, dict(launch.args), launch.grid, launch.block)["out"]
    want = module.expected().ravel()
    return {"name": "seed example (x2, interleaved rows, slots 0 2 8 10)",
            "opcode": module.LDMATRIX, "shared": repr(module.shared_layout),
            "registers": repr(module.register_layout), "instructions_per_warp": 2,
            "device_vs_simulator_mismatches": differs(device, simulated),
            "simulator_vs_contract_mismatches": differs(simulated, want),
            "device_vs_seed_table_mismatches": differs(device, want),
            "lane5_slots_0_2_8_10": [int(x) for x in device.reshape(32, 12)[5, [0, 2, 8, 10]]],
            "words": int(device.size)}


def round_trip(case: Case, rng: np.random.Generator) -> dict[str, Any]:
    """stmatrix registers to shared, read shared back with ldmatrix: the registers return."""
    from backends.cuda.run import run

    store = probe_kernel(case.opcode, case.shared, case.shared_words, case.registers,
                         case.register_words)
    load_op = case.opcode.replace("stmatrix", "ldmatrix")
    load = probe_kernel(load_op, case.shared, case.shared_words, case.registers,
                        case.register_words)
    regs = rng.integers(0, 2**32, 32 * case.register_words, dtype=np.uint32)
    shared = run(store, {"regs_in": regs, "init": np.zeros(case.shared_words, np.uint32),
                         "out": np.zeros(case.shared_words, np.uint32)}, (1,), (32,))["out"]
    back = run(load, {"src": shared, "out": np.zeros_like(regs)}, (1,), (32,))["out"]
    used = np.unique(case.registers.offsets()[..., 0, 0])
    got, want = back.reshape(32, -1)[:, used], regs.reshape(32, -1)[:, used]
    return {"name": f"round trip {case.opcode} -> {load_op}", "opcode": case.opcode,
            "shared": repr(case.shared), "registers": repr(case.registers),
            "instructions_per_warp": case.repeats,
            "device_vs_simulator_mismatches": differs(got, want),
            "simulator_vs_contract_mismatches": 0, "words": int(got.size)}


@pytest.fixture(scope="module")
def measured() -> list[dict[str, Any]]:
    from backends.cuda.run import device_arch, device_name

    rng = np.random.default_rng(2026)
    started = time.perf_counter()
    rows = [seed_example()]
    for kind in ("ldmatrix", "stmatrix"):
        for count in (1, 2, 4):
            for trans in (False, True):
                rows.append(check_case(f"{kind} x{count}{' trans' if trans else ''} plain",
                                       plain(kind, count, trans, repeats=2), rng))
                rows.append(check_case(f"{kind} x{count}{' trans' if trans else ''} scattered",
                                       scattered(kind, count, trans, rng), rng))
    for count in (1, 2, 4):
        for trans in (False, True):
            rows.append(round_trip(scattered("stmatrix", count, trans, rng), rng))
    ok = all(r["device_vs_simulator_mismatches"] == 0 and r["simulator_vs_contract_mismatches"]
             == 0 for r in rows)
    record("tile_patterns_h200", {"device": device_name(), "arch": device_arch(),
                                  "all_bit_exact": ok, "cases": rows,
                                  "seconds": round(time.perf_counter() - started, 2)})
    return rows


def _moves(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if not r["name"].startswith("round trip")]


@pytest.mark.device
@needs.hopper
def test_every_pattern_moves_the_words_the_simulator_moves(measured: list[dict[str, Any]]
                                                           ) -> None:
    differ = [(r["name"], r["device_vs_simulator_mismatches"]) for r in _moves(measured)
              if r["device_vs_simulator_mismatches"]]
    assert not differ


@pytest.mark.device
@needs.hopper
def test_the_simulator_moves_the_words_the_contract_says(measured: list[dict[str, Any]]
                                                         ) -> None:
    differ = [(r["name"], r["simulator_vs_contract_mismatches"]) for r in _moves(measured)
              if r["simulator_vs_contract_mismatches"]]
    assert not differ


@pytest.mark.device
@needs.hopper
def test_the_seed_example_gives_its_table_lane_5_holding_18_26_19_27(
        measured: list[dict[str, Any]]) -> None:
    seed = measured[0]
    assert seed["device_vs_seed_table_mismatches"] == 0
    assert seed["lane5_slots_0_2_8_10"] == [18, 26, 19, 27]


@pytest.mark.device
@needs.hopper
def test_stmatrix_then_ldmatrix_gives_the_registers_back(measured: list[dict[str, Any]]
                                                         ) -> None:
    trips = [r for r in measured if r["name"].startswith("round trip")]
    assert len(trips) == 6
    assert not [(r["name"], r["device_vs_simulator_mismatches"]) for r in trips
                if r["device_vs_simulator_mismatches"]]
