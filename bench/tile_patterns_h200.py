"""Tile patterns on a real GPU against the simulator, bit for bit.

For the seed's example and for x1/x2/x4 ldmatrix and stmatrix, with and without .trans, on
plain and on interleaved/gapped layouts (a fixed seed), this compiles each probe kernel's CUDA
with NVRTC for the device, runs it, simulates it, and compares every output word. It also runs
a stmatrix -> ldmatrix round trip on the device. Writes bench/results/tile_patterns_h200.json
and prints a table. Needs an NVIDIA GPU with sm_90 (stmatrix) and cuda-bindings.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from bench.harness import RESULTS, ROOT, write

# a device check drawing on the test suite's cases (tests/), as pytest does
sys.path.insert(0, str(ROOT / "tests"))

from tile_cases import Case, expected_registers, expected_shared  # type: ignore[import-not-found]

from backends.cuda.run import device_arch, device_name, run
from sarek.layout import TileLayout, laneid
from sarek.loader import load_module
from sarek.tile_probe import probe_kernel
from sim import simulate


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


def check_case(name: str, case: Case, rng: np.random.Generator) -> dict[str, object]:
    kernel = probe_kernel(case.opcode, case.shared, case.shared_words, case.registers,
                          case.register_words)
    if case.opcode.startswith("ldmatrix"):
        args = {"src": rng.integers(0, 2**32, case.shared_words, dtype=np.uint32),
                "out": np.zeros(32 * case.register_words, np.uint32)}
        contract = expected_registers(case, args["src"], 4294966519).ravel()
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


def seed_example() -> dict[str, object]:
    module = load_module(ROOT / "examples" / "ldmatrix_interleaved.py")
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


def round_trip(case: Case, rng: np.random.Generator) -> dict[str, object]:
    """stmatrix registers to shared, read shared back with ldmatrix: the registers return."""
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


def main() -> int:
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
    result = {"device": device_name(), "arch": device_arch(), "all_bit_exact": ok,
              "cases": rows, "seconds": round(time.perf_counter() - started, 2)}
    out = RESULTS / "tile_patterns_h200.json"
    write("tile_patterns_h200", result, out)
    print(f"{result['device']} ({result['arch']}): {len(rows)} cases")
    print(f"{'case':52} {'instr':>5} {'words':>6} {'dev!=sim':>8} {'sim!=contract':>13}")
    for r in rows:
        print(f"{r['name'][:52]:52} {r['instructions_per_warp']:>5} {r['words']:>6} "
              f"{r['device_vs_simulator_mismatches']:>8} "
              f"{r['simulator_vs_contract_mismatches']:>13}")
    print("all bit-exact:", ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
