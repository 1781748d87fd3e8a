"""The CUDA printer's arithmetic on a GPU against the simulator, bit for bit.

The probes of ``arith_cases``: for every element type one kernel applying every binary and
unary operation of the IR to edge-case and random inputs (zeros of both signs, infinities, NaN,
subnormals, the limits of the integer types, halfway cases), one kernel per source type
converting to every element type, and one kernel per float type applying the math functions.
Each output is compared bit for bit with the simulator (any NaN matches any NaN).
Transcendental functions (exp, log, sin, cos, tanh) are recorded apart: the simulator rounds
the float64 result, devices may differ by a few units in the last place. Records
``arith_h200``.
"""

from __future__ import annotations

from typing import Any

import needs
import numpy as np
import pytest
from arith_cases import TRANSCENDENTAL, N, compare, probes
from records import record

from sim import simulate

LOOSE = {f.value for f in TRANSCENDENTAL}


@pytest.fixture(scope="module")
def measured() -> list[dict[str, Any]]:
    from backends.cuda.run import device_arch, device_name, run

    rng = np.random.default_rng(7)
    rows = []
    with np.errstate(all="ignore"):
        for probe in probes(rng):
            want = simulate(probe.kernel, probe.args, grid=1, block=N)
            got = run(probe.kernel, probe.args, (1,), (N,))
            rows += [{"kernel": probe.kernel.name, "what": what, "mismatches": bad}
                     for what, bad in compare(probe, got, want)]
    exact = [r for r in rows if r["what"] not in LOOSE]
    record("arith_h200", {"device": device_name(), "arch": device_arch(), "inputs_per_case": N,
                          "all_exact_operations_bit_exact": all(r["mismatches"] == 0
                                                                for r in exact),
                          "rows": rows})
    return rows


@pytest.mark.device
@needs.cuda
def test_every_exact_operation_and_conversion_is_bit_exact(measured: list[dict[str, Any]]
                                                           ) -> None:
    differ = [(r["kernel"], r["what"], r["mismatches"]) for r in measured
              if r["mismatches"] and r["what"] not in LOOSE]
    assert not differ, f"outputs of {N} that differ from the simulator: {differ}"
