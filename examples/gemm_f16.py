"""GEMM over f16 arrays: operands widen to f32 when loaded, the f32 sum rounds to f16 on store."""

import numpy as np

import sarek
from sarek import Global, block_dim, block_idx, f16, f32, i32, thread_idx
from sarek.launch import Launch
from sarek.reference import gemm_sequential


@sarek.kernel
def matmul_f16(a: Global[f16], b: Global[f16], c: Global[f16], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = f32(0.0)
        for p in range(k):
            acc += a[row * k + p] * b[p * n + col]
        c[row * n + col] = acc


def make(m: int, n: int, k: int, seed: int = 0) -> Launch:
    rng = np.random.default_rng(seed)
    args = {"a": rng.standard_normal(m * k).astype(np.float16),
            "b": rng.standard_normal(k * n).astype(np.float16),
            "c": np.zeros(m * n, np.float16), "m": m, "n": n, "k": k}
    return Launch(matmul_f16.ir, args, grid=(-(-n // 16), -(-m // 16), 1), block=(16, 16, 1))


def reference(launch: Launch) -> dict[str, np.ndarray]:
    """f32 accumulation in k order of the f16 operands, rounded once to f16."""
    m, n, k = (launch.args[x] for x in "mnk")
    a, b = launch.args["a"].reshape(m, k), launch.args["b"].reshape(k, n)
    return {"c": gemm_sequential(a, b).astype(np.float16).ravel()}


if __name__ == "__main__":
    run = make(40, 24, 30)
    print("bit-identical to NumPy:", np.array_equal(run.simulate()["c"], reference(run)["c"]))
