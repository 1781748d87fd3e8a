"""Naive f32 GEMM: one invocation per output, row from y and column from x (a 2-D mapping)."""

import numpy as np

import sarek
from sarek import Global, block_dim, block_idx, f32, i32, thread_idx
from sarek.launch import Launch
from sarek.reference import gemm_sequential


@sarek.kernel
def matmul(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = f32(0.0)
        for p in range(k):
            acc += a[row * k + p] * b[p * n + col]
        c[row * n + col] = acc


def make(m: int, n: int, k: int, seed: int = 0) -> Launch:
    """A launch of ``matmul`` on random inputs with 16x16 blocks covering the m x n output."""
    rng = np.random.default_rng(seed)
    args = {"a": rng.standard_normal(m * k, dtype=np.float32),
            "b": rng.standard_normal(k * n, dtype=np.float32),
            "c": np.zeros(m * n, np.float32), "m": m, "n": n, "k": k}
    return Launch(matmul.ir, args, grid=(-(-n // 16), -(-m // 16), 1), block=(16, 16, 1))


def reference(launch: Launch) -> dict[str, np.ndarray]:
    """The expected ``c``: products added in k order, each operation rounded to f32."""
    m, n, k = (launch.args[x] for x in "mnk")
    a, b = launch.args["a"].reshape(m, k), launch.args["b"].reshape(k, n)
    return {"c": gemm_sequential(a, b).ravel()}


if __name__ == "__main__":
    run = make(48, 40, 24)
    got = run.simulate()["c"]
    print("bit-identical to NumPy:", np.array_equal(got, reference(run)["c"]))
