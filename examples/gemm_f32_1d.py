"""f32 GEMM with a 1-D mapping: invocation ``tid`` computes row ``tid // n``, column ``tid % n``."""

import numpy as np

import sarek
from sarek import Global, block_dim, block_idx, f32, i32, thread_idx
from sarek.launch import Launch
from sarek.reference import gemm_sequential


@sarek.kernel
def matmul_1d(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32):
    tid = block_idx.x * block_dim.x + thread_idx.x
    if tid < m * n:
        row = tid // n
        col = tid % n
        acc = f32(0.0)
        for p in range(k):
            acc += a[row * k + p] * b[p * n + col]
        c[tid] = acc


def make(m: int, n: int, k: int, seed: int = 0) -> Launch:
    """A launch of 128-invocation blocks covering all m*n outputs."""
    rng = np.random.default_rng(seed)
    args = {"a": rng.standard_normal(m * k, dtype=np.float32),
            "b": rng.standard_normal(k * n, dtype=np.float32),
            "c": np.zeros(m * n, np.float32), "m": m, "n": n, "k": k}
    return Launch(matmul_1d.ir, args, grid=(-(-(m * n) // 128), 1, 1), block=(128, 1, 1))


def reference(launch: Launch) -> dict[str, np.ndarray]:
    m, n, k = (launch.args[x] for x in "mnk")
    a, b = launch.args["a"].reshape(m, k), launch.args["b"].reshape(k, n)
    return {"c": gemm_sequential(a, b).ravel()}


if __name__ == "__main__":
    run = make(33, 21, 17)
    print("bit-identical to NumPy:", np.array_equal(run.simulate()["c"], reference(run)["c"]))
