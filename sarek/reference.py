"""Independent NumPy references for GEMM-shaped kernels.

These compute what a one-output-per-invocation GEMM kernel computes, with whole-matrix NumPy
operations instead of a simulated launch: the accumulator starts at ``init`` and each product
is added in k order, every operation rounded in the accumulator's type (float32 and float64
round to nearest even after each multiply and each add, integers wrap). Tests and the demo
check the simulator against them.
"""

from __future__ import annotations

import numpy as np


def gemm_sequential(a: np.ndarray, b: np.ndarray, init: np.ndarray | float | int = 0,
                    dtype: np.dtype | type = np.float32) -> np.ndarray:
    """``init + sum_p a[:, p] * b[p, :]`` accumulated in k order in ``dtype``.

    ``a`` is (m, k) and ``b`` is (k, n), already widened to ``dtype``; ``init`` broadcasts
    to (m, n). Products and sums are separate roundings (no fused multiply-add).
    """
    dt = np.dtype(dtype)
    a, b = a.astype(dt), b.astype(dt)
    acc = np.broadcast_to(np.asarray(init).astype(dt), (a.shape[0], b.shape[1])).copy()
    with np.errstate(over="ignore"):
        for p in range(a.shape[1]):
            acc = acc + np.multiply.outer(a[:, p], b[p, :])
    return acc
