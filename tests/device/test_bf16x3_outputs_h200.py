"""Bf16x3's outputs on the H200 under CUDA's policy schedule, on whole tiles whose packed trips
hold sums that are not usable (``specs/matrix-pattern-rewrite.md`` 6.4): such a trip stores
nothing at first, is marked in ``sk_redo``, and the loop after it recomputes each of its sums
by the original's own loop before storing the trip's outputs.

``examples/gemm_f32.py`` at 256x256x800 (four whole 128x128 tiles; a reduction past six of
the 128-deep chunks of 6.3) on random operands with three outputs' sums made unusable: row 5
of A and column 9 of B at 2^59, so that C[5, 9] is about 800 * 2^118 = 2^127.6 (finite, beyond
2^127); an infinity in A (row 130, whose split terms give inf - inf); a NaN in B (column 200).
The device's C must equal the simulator's bit for bit (any NaN matching any NaN), and where a
sum was recomputed, the original kernel's C on the same device.
"""

from __future__ import annotations

import needs
import numpy as np
from conftest import example
from records import record

SCHEDULE = "t128x128k64s2gwro"
SIZE = (256, 256, 800)


def same(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Bits equal, any NaN matching any NaN."""
    return (x.view(np.uint32) == y.view(np.uint32)) | (np.isnan(x) & np.isnan(y))


@needs.hopper
def test_trips_with_sums_beyond_reach_store_the_originals_bits_and_the_simulators() -> None:
    module = example("gemm_f32")
    m, n, k = SIZE
    launch = module.make(m, n, k, seed=21)
    a = launch.args["a"].reshape(m, k)
    b = launch.args["b"].reshape(k, n)
    a[5], b[:, 9] = 2.0**59, 2.0**59
    a[130, 7] = np.inf
    b[100, 200] = np.nan
    outs = {}
    for name, options in (("device", {"target": "cuda"}), ("simulator", {"target": "sim"}),
                          ("original", {"target": "cuda", "rewrite": False})):
        if name != "original":
            options |= {"lowering": "Bf16x3_operands", "schedule": SCHEDULE}
        args = {key: (v.copy() if isinstance(v, np.ndarray) else v)
                for key, v in launch.args.items()}
        module.matmul.with_options(**options)[launch.grid, launch.block](*args.values())
        outs[name] = args["c"].reshape(m, n)
    device, original = outs["device"], outs["original"]
    assert 2.0**127 <= abs(float(original[5, 9])) < np.inf
    recomputed = np.zeros((m, n), bool)
    recomputed[5, 9] = recomputed[130] = recomputed[:, 200] = True
    differ = int((~same(device, outs["simulator"])).sum())
    unlike_original = int((~same(device, original))[recomputed].sum())
    record("bf16x3_outputs_redo_conformance_h200", {
        "size": SIZE, "schedule": SCHEDULE, "differ_from_simulator": differ,
        "recomputed_differ_from_original": unlike_original,
        "recomputed_outputs": int(recomputed.sum())})
    assert differ == 0 and unlike_original == 0
