"""int32 GEMM. Integer arithmetic wraps modulo 2^32, so every input is defined."""

import numpy as np

import sarek
from sarek import Global, block_dim, block_idx, i32, thread_idx
from sarek.launch import Launch
from sarek.reference import gemm_sequential


@sarek.kernel
def matmul_i32(a: Global[i32], b: Global[i32], c: Global[i32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = 0
        for p in range(k):
            acc += a[row * k + p] * b[p * n + col]
        c[row * n + col] = acc


def make(m: int, n: int, k: int, seed: int = 0) -> Launch:
    """Random int32 inputs over the whole range, so products and sums wrap."""
    rng = np.random.default_rng(seed)
    lo, hi = np.iinfo(np.int32).min, np.iinfo(np.int32).max
    args = {"a": rng.integers(lo, hi, m * k, dtype=np.int32, endpoint=True),
            "b": rng.integers(lo, hi, k * n, dtype=np.int32, endpoint=True),
            "c": np.zeros(m * n, np.int32), "m": m, "n": n, "k": k}
    return Launch(matmul_i32.ir, args, grid=(-(-n // 16), -(-m // 16), 1), block=(16, 16, 1))


def reference(launch: Launch) -> dict[str, np.ndarray]:
    """The exact product modulo 2^32."""
    m, n, k = (launch.args[x] for x in "mnk")
    a, b = launch.args["a"].reshape(m, k), launch.args["b"].reshape(k, n)
    return {"c": gemm_sequential(a, b, dtype=np.int32).ravel()}


if __name__ == "__main__":
    run = make(40, 24, 30)
    print("bit-identical to NumPy:", np.array_equal(run.simulate()["c"], reference(run)["c"]))
